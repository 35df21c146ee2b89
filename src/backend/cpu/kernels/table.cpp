#include "backend/cpu/kernels/common.h"

namespace tessera::cpu::TESSERA_ISA {

void fill_kernel_table(KernelTable& t) {
  fill_elementwise_kernels(t);
  fill_reduce_kernels(t);
  fill_norm_kernels(t);
  fill_optim_kernels(t);
  fill_pool_kernels(t);
  fill_quant_kernels(t);
  fill_sparse_kernels(t);
  fill_skinny_kernels(t);
  fill_llm_kernels(t);
}

}  // namespace tessera::cpu::TESSERA_ISA
