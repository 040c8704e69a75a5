//! CUDA backend: driver probe, NVRTC compilation of `kernels/*.cu`, launches through cudarc's
//! driver API.
//!
//! cudarc is built with dynamic loading, so nothing CUDA is needed to build or test. cudarc
//! *panics* when libcuda is missing, so [`Gpu::get`] probes first, once per process: it opens
//! `libcuda.so.1` with libloading (failure → "no CUDA driver found (libcuda.so.1: …)"), then
//! creates the context on device 0 inside `catch_unwind`, then opens NVRTC ([`nvrtc`]). Any
//! failure becomes the reason every CUDA case is `skipped`.
//!
//! Kernel files are embedded by `build.rs` ([`kernels::SOURCES`]); launch geometries are pure
//! functions ([`geometry`]); [`launch`] and [`dim32`] are the helpers every wrapper in [`ops`]
//! (or an op file's own wrapper) uses.
//!
//! Kernels are compiled by NVRTC for the device's own architecture (`sm_XY`, a CUBIN), once
//! per kernel file and process ([`kernels`]).
//!
//! Kernel timings: every op launch is bracketed by CUDA events; the elapsed device time is left
//! for [`take_device_seconds`], which `Ctx::dispatch` uses instead of wall time (so benchmark
//! mode picks among tile / split configurations by event time).

pub mod copy;
pub mod fingerprint;
pub mod geometry;
pub mod kernels;
pub mod nvrtc;
pub mod ops;

use anyhow::{anyhow, Result};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, LaunchArgs,
    LaunchConfig,
};
use serde::Serialize;
use std::cell::Cell;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

/// A CUDA device ready to launch kernels.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: String,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    info: DeviceInfo,
}

/// What a GPU run's bits may depend on (for the platform fingerprint).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceInfo {
    /// Device name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Compute capability as `sm90`.
    pub compute_capability: String,
    /// Kernel driver version (`/proc/driver/nvidia/version`), or `unknown`.
    pub driver_version: String,
    /// Highest CUDA version the driver supports (`cuDriverGetVersion`), e.g. `12.4`.
    pub cuda_version: String,
    /// NVRTC version, e.g. `12.9`.
    pub nvrtc_version: String,
}

/// Facts about the GPU, or `None` without one.
pub fn device_info() -> Option<DeviceInfo> {
    Gpu::get().ok().map(|g| g.info.clone())
}

thread_local! {
    static DEVICE_SECONDS: Cell<Option<f64>> = const { Cell::new(None) };
}

/// Device seconds measured with CUDA events by the CUDA ops since the last call, if any ran on
/// this thread (cleared by the call).
pub fn take_device_seconds() -> Option<f64> {
    DEVICE_SECONDS.with(|c| c.take())
}

fn add_device_seconds(s: f64) {
    DEVICE_SECONDS.with(|c| c.set(Some(c.get().unwrap_or(0.0) + s)));
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

/// The name the probe opens for the driver library.
const LIBCUDA: &str = if cfg!(windows) {
    "nvcuda.dll"
} else {
    "libcuda.so.1"
};

impl Gpu {
    /// The process-wide GPU, or the reason there is none (probed once per process).
    pub fn get() -> Result<Arc<Gpu>, String> {
        static GPU: OnceLock<Result<Arc<Gpu>, String>> = OnceLock::new();
        GPU.get_or_init(|| Gpu::probe().map(Arc::new)).clone()
    }

    fn probe() -> Result<Gpu, String> {
        // SAFETY: opening the driver library runs only its initialisers.
        if let Err(e) = unsafe { libloading::Library::new(LIBCUDA) } {
            return Err(format!("no CUDA driver found ({e})"));
        }
        let ctx = match catch_unwind(AssertUnwindSafe(|| CudaContext::new(0))) {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(format!("no usable CUDA device: {e:?}")),
            Err(p) => return Err(format!("CUDA driver failed to load: {}", panic_text(p))),
        };
        let nv = nvrtc::load()?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| format!("CUDA compute capability: {e:?}"))?;
        let mut cuda = 0;
        // SAFETY: one valid out-pointer; the driver is loaded (the context exists).
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut cuda) };
        let driver = std::fs::read_to_string("/proc/driver/nvidia/version")
            .ok()
            .and_then(|s| {
                s.split_whitespace()
                    .skip_while(|w| *w != "Kernel")
                    .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "unknown".into());
        let info = DeviceInfo {
            name: ctx.name().unwrap_or_else(|_| "unknown".into()),
            compute_capability: format!("sm{major}{minor}"),
            driver_version: driver,
            cuda_version: format!("{}.{}", cuda / 1000, (cuda % 1000) / 10),
            nvrtc_version: nv.version().unwrap_or_else(|e| e),
        };
        Ok(Gpu {
            stream: ctx.default_stream(),
            ctx,
            arch: format!("sm_{major}{minor}"),
            modules: Mutex::new(HashMap::new()),
            info,
        })
    }

    /// Facts about this device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The stream every op runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// A stream owned by another library in this GPU's context (torch's current stream), as a
    /// cudarc stream that does not destroy it when dropped.
    ///
    /// # Safety
    /// `raw` must be a valid `CUstream` of device 0's primary context (or 0, the legacy
    /// default stream), kept alive by its owner while the wrapper is used.
    pub unsafe fn borrowed_stream(&self, raw: u64) -> Arc<CudaStream> {
        self.ctx
            .wrap_borrowed_stream(raw as cudarc::driver::sys::CUstream)
    }

    /// Makes this GPU's context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| anyhow!("binding the CUDA context: {e:?}"))
    }

    /// Kernel `name` of `file` (compiled and loaded once per process).
    pub fn function(&self, file: &'static str, name: &str) -> Result<CudaFunction> {
        self.bind()?;
        let module = {
            let mut mods = self.modules.lock().unwrap();
            match mods.get(file) {
                Some(m) => m.clone(),
                None => {
                    let cubin = kernels::compile_for(file, &self.arch)?;
                    let m = self
                        .ctx
                        .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
                        .map_err(|e| anyhow!("loading kernels/{file} on the GPU: {e:?}"))?;
                    mods.insert(file, m.clone());
                    m
                }
            }
        };
        module
            .load_function(name)
            .map_err(|e| anyhow!("kernel {name} in kernels/{file}: {e:?}"))
    }

    /// Copies `x` to the device.
    pub fn upload<T: DeviceRepr>(&self, x: &[T]) -> Result<CudaSlice<T>> {
        self.stream
            .clone_htod(x)
            .map_err(|e| anyhow!("copy to GPU: {e:?}"))
    }

    /// `n` zeroed device elements.
    pub fn zeros<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        n: usize,
    ) -> Result<CudaSlice<T>> {
        self.stream
            .alloc_zeros(n)
            .map_err(|e| anyhow!("GPU allocation of {n} elements: {e:?}"))
    }

    /// Copies `d` back to the host and waits for the copy.
    pub fn download<T: DeviceRepr + Default + Clone>(&self, d: &CudaSlice<T>) -> Result<Vec<T>> {
        let v = self
            .stream
            .clone_dtoh(d)
            .map_err(|e| anyhow!("copy from GPU: {e:?}"))?;
        self.stream
            .synchronize()
            .map_err(|e| anyhow!("waiting for the GPU: {e:?}"))?;
        Ok(v)
    }

    /// Runs `launch` (kernel launches on [`Gpu::stream`]) between two CUDA events, waits for it,
    /// and adds the elapsed device time for [`take_device_seconds`].
    pub fn timed(&self, launch: impl FnOnce(&Arc<CudaStream>) -> Result<()>) -> Result<()> {
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let ev = |what| anyhow!("CUDA event {what}");
        let start = self.stream.record_event(flags).map_err(|_| ev("start"))?;
        launch(&self.stream)?;
        let end = self.stream.record_event(flags).map_err(|_| ev("end"))?;
        end.synchronize()
            .map_err(|e| anyhow!("kernel failed: {e:?}"))?;
        let ms = start.elapsed_ms(&end).map_err(|_| ev("timing"))?;
        add_device_seconds(ms as f64 / 1e3);
        Ok(())
    }
}

/// The GPU, as an error naming the reason when there is none.
pub fn gpu() -> Result<Arc<Gpu>> {
    Gpu::get().map_err(|e| anyhow!("CUDA backend unavailable: {e}"))
}

/// Launches the kernel of `args` (built with [`CudaStream::launch_builder`]) with geometry `geo`;
/// errors name the kernel (`what`). Callers must push exactly the kernel's parameters, with
/// buffers as long as the sizes passed beside them.
pub fn launch(args: &mut LaunchArgs<'_>, geo: geometry::Geometry, what: &str) -> Result<()> {
    let (grid_dim, block_dim) = geo;
    let cfg = LaunchConfig {
        grid_dim,
        block_dim,
        shared_mem_bytes: 0,
    };
    // SAFETY: every kernel's parameter list matches the arguments its caller pushes, and the
    // buffers are as long as the sizes passed with them (the documented contract).
    unsafe { args.launch(cfg) }
        .map(|_| ())
        .map_err(|e| anyhow!("launching {what}: {e:?}"))
}

/// `v` as a kernel's `u32` size argument, or an error naming it (`what`) when it does not fit.
pub fn dim32(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| anyhow!("{what} = {v} is too large for the CUDA kernels"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_never_panics_and_explains_itself() {
        match Gpu::get() {
            Ok(g) => assert!(g.info().compute_capability.starts_with("sm")),
            Err(reason) => {
                assert!(!reason.is_empty());
                assert!(device_info().is_none());
                assert_eq!(Gpu::get().err(), Some(reason), "probed once");
            }
        }
        assert_eq!(take_device_seconds(), None);
    }
}
