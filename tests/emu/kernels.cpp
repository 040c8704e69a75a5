// Every kernel of kernels/*.cu compiled for the host emulation (see cuda_host.hpp).
#include "cuda_host.hpp"

#include "../../kernels/col_sum.cu"
#include "../../kernels/dropout.cu"
#include "../../kernels/layer_norm.cu"
#include "../../kernels/matmul.cu"
#include "../../kernels/philox.cu"
#include "../../kernels/reduce_sum.cu"
#include "../../kernels/scatter_add.cu"
#include "../../kernels/sha256.cu"
#include "../../kernels/softmax.cu"

// Device functions of philox.cuh exported for direct comparison with src/rng.rs.
extern "C" float emu_philox_normal(u32 w0, u32 w1) { return philox_normal(w0, w1); }
extern "C" double emu_det_ln(double x) { return det_ln(x); }
extern "C" double emu_det_cos_2pi(double u) { return det_cos_2pi(u); }
