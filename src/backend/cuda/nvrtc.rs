//! NVRTC (CUDA's run-time compiler) loaded with `libloading`, never panicking.
//!
//! Why not `cudarc::nvrtc`: cudarc 0.19 panics when it cannot open libnvrtc, and it only tries
//! the names `libnvrtc.so`, `libnvrtc.so.12`, `.so.11`, ... (never `.so.13`, the name in CUDA 13
//! wheels). Here the library is found, in this order, at:
//! 1. `BITEXACT_NVRTC`: a path to the `.so` itself, or a directory holding it (the directory
//!    itself or its `lib/` subdirectory, as in the pip wheel layout);
//! 2. the plain names `libnvrtc.so.13`, `libnvrtc.so.12`, `libnvrtc.so` (so `LD_LIBRARY_PATH`
//!    and the system's library path work);
//! 3. the pip wheels `nvidia-cuda-nvrtc` / `nvidia-cuda-nvrtc-cu12` of `python3` on `PATH`
//!    (`site-packages/nvidia/cuda_nvrtc/lib/` or `site-packages/nvidia/cu13/lib/`).
//!
//! When NVRTC is opened from a directory, the `libnvrtc-builtins.so.*` beside it is opened
//! first (CUDA 13 wheels lack the RUNPATH NVRTC needs to find it). Every failure becomes an
//! error string; the library is opened once per process.

use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

type Prog = *mut c_void;
type NvrtcVersion = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type CreateProgram = unsafe extern "C" fn(
    *mut Prog,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileProgram = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
type GetSize = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
type GetText = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
type DestroyProgram = unsafe extern "C" fn(*mut Prog) -> c_int;
type GetErrorString = unsafe extern "C" fn(c_int) -> *const c_char;

/// An opened NVRTC library.
pub struct Nvrtc {
    lib: Library,
    /// `libnvrtc-builtins` opened first from the same directory (kept loaded): NVRTC opens it
    /// by name at compile time, and some wheels lack the RUNPATH that would find it.
    _builtins: Vec<Library>,
    /// Where it was opened from (a path or a library name).
    pub origin: String,
}

/// Library file names tried in a directory or by the dynamic loader, newest first.
const NAMES: [&str; 3] = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

/// The process-wide NVRTC, or why there is none.
pub fn load() -> Result<&'static Nvrtc, String> {
    static LIB: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    LIB.get_or_init(open).as_ref().map_err(Clone::clone)
}

fn open() -> Result<Nvrtc, String> {
    let mut tried = Vec::new();
    let mut attempt = |candidate: String| -> Option<Nvrtc> {
        let builtins = builtins_beside(Path::new(&candidate));
        // SAFETY: loading NVRTC runs only its (side-effect free) initialisers.
        match unsafe { Library::new(&candidate) } {
            Ok(lib) => Some(Nvrtc {
                lib,
                _builtins: builtins,
                origin: candidate,
            }),
            Err(e) => {
                tried.push(format!("{candidate}: {e}"));
                None
            }
        }
    };
    if let Some(p) = std::env::var_os("BITEXACT_NVRTC").filter(|p| !p.is_empty()) {
        for c in candidates_in(Path::new(&p)) {
            if let Some(n) = attempt(c) {
                return Ok(n);
            }
        }
        return Err(format!(
            "no NVRTC at BITEXACT_NVRTC={} ({})",
            Path::new(&p).display(),
            tried.join("; ")
        ));
    }
    for name in NAMES {
        if let Some(n) = attempt(name.to_string()) {
            return Ok(n);
        }
    }
    for dir in python_wheel_dirs() {
        for c in candidates_in(&dir) {
            if let Some(n) = attempt(c) {
                return Ok(n);
            }
        }
    }
    Err(format!(
        "no NVRTC found (set BITEXACT_NVRTC to libnvrtc.so.12/.13 or its directory, or `pip install nvidia-cuda-nvrtc-cu12`; tried {})",
        tried.join("; ")
    ))
}

/// `libnvrtc-builtins.so.*` beside the library at `path` (a path with a directory), opened.
fn builtins_beside(path: &Path) -> Vec<Library> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libnvrtc-builtins.so"))
        })
        // SAFETY: the NVRTC builtins library has no initialisers with side effects.
        .filter_map(|p| unsafe { Library::new(&p) }.ok())
        .collect()
}

/// Library paths to try for `p`: the file itself, or the known names in `p` and `p/lib`.
fn candidates_in(p: &Path) -> Vec<String> {
    if p.is_file() {
        return vec![p.display().to_string()];
    }
    [p.to_path_buf(), p.join("lib")]
        .iter()
        .flat_map(|d| NAMES.iter().map(move |n| d.join(n)))
        .filter(|f| f.is_file())
        .map(|f| f.display().to_string())
        .collect()
}

/// Directories of NVRTC pip wheels installed for `python3` (empty when there is none).
pub fn python_wheel_dirs() -> Vec<PathBuf> {
    let script = "import importlib\n\
for m in ('nvidia.cuda_nvrtc', 'nvidia.cu13'):\n\
    try:\n\
        print(list(importlib.import_module(m).__path__)[0])\n\
    except Exception:\n\
        pass\n";
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    std::process::Command::new(python)
        .args(["-c", script])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| PathBuf::from(l.trim()))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

impl Nvrtc {
    fn sym<T: Copy>(&self, name: &str) -> Result<T, String> {
        // SAFETY: the types above are the NVRTC C API's signatures for these names.
        unsafe { self.lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| format!("NVRTC at {} lacks {name}: {e}", self.origin))
    }

    fn error_string(&self, code: c_int) -> String {
        match self.sym::<GetErrorString>("nvrtcGetErrorString") {
            // SAFETY: NVRTC returns a static NUL-terminated string for any code.
            Ok(f) => unsafe { CStr::from_ptr(f(code)) }
                .to_string_lossy()
                .into_owned(),
            Err(_) => format!("NVRTC error {code}"),
        }
    }

    /// NVRTC's version as `major.minor`.
    pub fn version(&self) -> Result<String, String> {
        let f = self.sym::<NvrtcVersion>("nvrtcVersion")?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        let rc = unsafe { f(&mut major, &mut minor) };
        if rc != 0 {
            return Err(self.error_string(rc));
        }
        Ok(format!("{major}.{minor}"))
    }

    /// Compiles CUDA C++ `source` (called `name` in messages) with `headers` (include name,
    /// text) and `options` to PTX text, or to a CUBIN image when `cubin` (options must then name
    /// a real architecture, `sm_XY`). A compile error carries the file name and NVRTC's log.
    pub fn compile(
        &self,
        name: &str,
        source: &str,
        headers: &[(&str, &str)],
        options: &[String],
        cubin: bool,
    ) -> Result<Vec<u8>, String> {
        let cstr = |s: &str| CString::new(s).map_err(|_| format!("{name}: contains a NUL byte"));
        let src = cstr(source)?;
        let cname = cstr(name)?;
        let htext: Vec<CString> = headers
            .iter()
            .map(|h| cstr(h.1))
            .collect::<Result<_, _>>()?;
        let hname: Vec<CString> = headers
            .iter()
            .map(|h| cstr(h.0))
            .collect::<Result<_, _>>()?;
        let opts: Vec<CString> = options.iter().map(|o| cstr(o)).collect::<Result<_, _>>()?;
        let ptrs = |v: &[CString]| v.iter().map(|c| c.as_ptr()).collect::<Vec<_>>();
        let (htext_p, hname_p, opts_p) = (ptrs(&htext), ptrs(&hname), ptrs(&opts));
        let create = self.sym::<CreateProgram>("nvrtcCreateProgram")?;
        let compile = self.sym::<CompileProgram>("nvrtcCompileProgram")?;
        let log_size = self.sym::<GetSize>("nvrtcGetProgramLogSize")?;
        let log = self.sym::<GetText>("nvrtcGetProgramLog")?;
        let (out_size, out) = if cubin {
            ("nvrtcGetCUBINSize", "nvrtcGetCUBIN")
        } else {
            ("nvrtcGetPTXSize", "nvrtcGetPTX")
        };
        let out_size = self.sym::<GetSize>(out_size)?;
        let out = self.sym::<GetText>(out)?;
        let destroy = self.sym::<DestroyProgram>("nvrtcDestroyProgram")?;
        let mut prog: Prog = std::ptr::null_mut();
        // SAFETY: every pointer refers to a live NUL-terminated string or array of them whose
        // length is passed alongside; `prog` is destroyed before returning.
        unsafe {
            let rc = create(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                headers.len() as c_int,
                htext_p.as_ptr(),
                hname_p.as_ptr(),
            );
            if rc != 0 {
                return Err(format!(
                    "{name}: nvrtcCreateProgram failed: {}",
                    self.error_string(rc)
                ));
            }
            let read = |size: GetSize, text: GetText| -> Vec<u8> {
                let mut n = 0usize;
                if size(prog, &mut n) != 0 || n == 0 {
                    return Vec::new();
                }
                let mut buf = vec![0u8; n];
                if text(prog, buf.as_mut_ptr() as *mut c_char) != 0 {
                    return Vec::new();
                }
                buf
            };
            let rc = compile(prog, opts_p.len() as c_int, opts_p.as_ptr());
            let result = if rc != 0 {
                Err(format!(
                    "{name}: NVRTC compilation failed ({}) with options {}:\n{}",
                    self.error_string(rc),
                    options.join(" "),
                    String::from_utf8_lossy(&read(log_size, log))
                        .trim_end_matches('\0')
                        .trim_end()
                ))
            } else {
                let mut bytes = read(out_size, out);
                if !cubin && bytes.last() == Some(&0) {
                    bytes.pop(); // PTX text comes NUL-terminated
                }
                Ok(bytes)
            };
            destroy(&mut prog);
            result
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_the_wheel_layout() {
        let scratch = crate::scratch::Scratch::new();
        let dir = scratch.0.clone();
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        let lib = dir.join("lib/libnvrtc.so.12");
        std::fs::write(&lib, b"not a library").unwrap();
        let want = vec![lib.display().to_string()];
        assert_eq!(candidates_in(&dir), want, "wheel directory");
        assert_eq!(candidates_in(&dir.join("lib")), want, "lib directory");
        assert_eq!(candidates_in(&lib), want, "the file itself");
        assert!(candidates_in(&dir.join("missing")).is_empty());
    }
}
