// Every kernel of kernels/*.cu compiled for the host emulation (see cuda_host.hpp).
#include "cuda_host.hpp"

#include "../../kernels/dropout.cu"
#include "../../kernels/layer_norm.cu"
#include "../../kernels/matmul.cu"
#include "../../kernels/philox.cu"
#include "../../kernels/reduce_sum.cu"
#include "../../kernels/scatter_add.cu"
#include "../../kernels/sha256.cu"
#include "../../kernels/softmax.cu"
