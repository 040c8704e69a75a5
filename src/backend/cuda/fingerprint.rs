//! Trace fingerprints ([`crate::fingerprint`]) of device memory, computed on the GPU by
//! `fingerprint_sums` (`kernels/fingerprint.cu`): one launch for all of an op's tensors, and
//! only each tensor's two 64-bit lane sums (16 bytes) come back to the host, where
//! [`Fingerprint::finish`] makes the last mix. The same value as the host's
//! [`crate::fingerprint::fingerprint`] of the same bytes, for any grid: the lanes are sums modulo
//! 2^64, which do not depend on the order of their terms.

use super::{geometry, gpu, launch};
use crate::fingerprint::Fingerprint;
use anyhow::{anyhow, Result};
use cudarc::driver::{DevicePtr, PushKernelArg};

/// Buffers per launch at most (a grid's y dimension).
const MAX_ITEMS: usize = 65_535;

// `fingerprint_sums` reduces a block of FP_BLOCK = 256 threads (kernels/fingerprint.cu), the
// block size `geometry::fingerprint` launches.
const _: () = assert!(geometry::BLOCK == 256);

/// Launches `fingerprint_sums` on `stream` (a raw `CUstream` of device 0's primary context,
/// torch's current stream; 0 is the legacy default stream) over `count` buffers listed in
/// device memory at `items` (`count` pairs of u64: a buffer's address, its length in bytes),
/// the longest `max_words` 64-bit words, adding buffer y's two lanes' sums into the u64 pair
/// at `out + 16 y` (zeroed by the caller): one launch per 65,535 buffers. Does not wait; the
/// caller reads `out` after the stream's work.
///
/// # Safety
/// `items` and `out` must hold `2 × count` u64 each on that device, and every listed buffer
/// its length in bytes, until the launched work has run.
pub unsafe fn launch_sums(
    items: u64,
    count: usize,
    max_words: u64,
    out: u64,
    stream: u64,
) -> Result<()> {
    let g = gpu()?;
    g.bind()?;
    // SAFETY: as the caller vouches, a stream of device 0's primary context that its owner
    // keeps alive for the call; `Gpu` retains that context.
    let s = unsafe { g.borrowed_stream(stream) };
    let f = g.function("fingerprint.cu", "fingerprint_sums")?;
    for first in (0..count).step_by(MAX_ITEMS) {
        let n = (count - first).min(MAX_ITEMS);
        let (at_items, at_out) = (items + 16 * first as u64, out + 16 * first as u64);
        let mut l = s.launch_builder(&f);
        l.arg(&at_items).arg(&at_out);
        launch(
            &mut l,
            geometry::fingerprint(max_words, n as u32),
            "fingerprint_sums",
        )?;
    }
    Ok(())
}

/// The fingerprints of `items`, each `(address, bytes)` of device memory on device 0 read as
/// one tensor's canonical bytes (any alignment), computed on `stream` (as [`launch_sums`])
/// after the work queued there; waits for them. Its buffers are allocated here: a caller with
/// its own allocator (torch's, in the Python package) calls [`launch_sums`].
///
/// # Safety
/// Each of `items` must be `bytes` bytes of device memory on device 0, alive and unchanged
/// until the call returns; `stream` as for [`launch_sums`].
pub unsafe fn device_fingerprints(items: &[(u64, usize)], stream: u64) -> Result<Vec<Fingerprint>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let g = gpu()?;
    g.bind()?;
    // SAFETY: as [`launch_sums`].
    let s = unsafe { g.borrowed_stream(stream) };
    let fail = |what: &'static str| move |e| anyhow!("{what} on the GPU: {e:?}");
    let flat: Vec<u64> = items.iter().flat_map(|&(p, n)| [p, n as u64]).collect();
    let list = s
        .clone_htod(&flat)
        .map_err(fail("copying the buffers' list"))?;
    let out = s
        .alloc_zeros::<u64>(flat.len())
        .map_err(fail("allocating the sums"))?;
    let words = items.iter().map(|&(_, n)| n.div_ceil(8) as u64).max();
    let (list_at, out_at) = (list.device_ptr(&s).0, out.device_ptr(&s).0);
    // SAFETY: `list` and `out` hold 2 × items.len() u64 and live past the wait below; the
    // caller vouches for the buffers.
    unsafe { launch_sums(list_at, items.len(), words.unwrap_or(0), out_at, stream)? };
    let sums = s.clone_dtoh(&out).map_err(fail("copying the sums"))?;
    s.synchronize().map_err(fail("fingerprinting"))?;
    Ok(sums
        .chunks_exact(2)
        .zip(items)
        .map(|(a, &(_, n))| Fingerprint::finish([a[0], a[1]], n as u64))
        .collect())
}

/// The fingerprints of host byte strings `data`, each copied to the GPU at byte offset `skew`
/// of its allocation (so a buffer that is not 8-byte aligned is read too) and fingerprinted
/// there by [`device_fingerprints`] in one launch (for tests against the host's fingerprint).
pub fn fingerprints_of(data: &[&[u8]], skew: usize) -> Result<Vec<Fingerprint>> {
    let g = gpu()?;
    let mut held = Vec::new();
    for d in data {
        let mut padded = vec![0xa5u8; skew];
        padded.extend_from_slice(d);
        held.push(g.upload(&padded)?);
    }
    let items: Vec<(u64, usize)> = held
        .iter()
        .zip(data)
        .map(|(h, d)| (h.device_ptr(g.stream()).0 + skew as u64, d.len()))
        .collect();
    g.stream()
        .synchronize()
        .map_err(|e| anyhow!("waiting for the uploads: {e:?}"))?;
    // SAFETY: `held` owns each buffer (its bytes at the offset) until this function returns;
    // the stream is the GPU's own.
    unsafe { device_fingerprints(&items, g.stream().cu_stream() as u64) }
}
