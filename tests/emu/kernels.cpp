// Host-emulation extras, compiled after cuda_host.hpp and every kernels/*.cu: tests/it/kernels_host.rs
// generates the translation unit that includes them all, from the library's list of kernel files.
#include "cuda_host.hpp"
#include "../../kernels/philox.cuh"

// Device functions of philox.cuh exported for direct comparison with src/rng.rs.
extern "C" float emu_philox_normal(u32 w0, u32 w1) { return philox_normal(w0, w1); }
extern "C" double emu_det_ln(double x) { return det_ln(x); }
extern "C" double emu_det_cos_2pi(double u) { return det_cos_2pi(u); }
