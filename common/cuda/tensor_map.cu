/// \file tensor_map.cu
/// \brief make_tensor_map: the driver's cuTensorMapEncodeTiled, reached through the runtime.
#include "common/cuda/tensor_map.cuh"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000

#include <string>

#include "common/cuda/cuda_check.cuh"

namespace common::cuda {

namespace {

/// The driver's cuTensorMapEncodeTiled, looked up once.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 function = [] {
    void* address = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &address, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || address == nullptr) {
      throw CudaError("the NVIDIA driver has no cuTensorMapEncodeTiled (a driver for CUDA 12.0 or later is needed)");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(address);
  }();
  return function;
}

}  // namespace

CUtensorMap make_tensor_map(const void* base, bool half, int64_t batch_heads, int64_t rows, int64_t d, int box_rows) {
  if (d % 8 != 0) {
    throw InputError("head_dim " + std::to_string(d) + " is not a multiple of 8 (TMA's rows are whole 16 bytes)");
  }
  const tma::TensorMapLayout layout = tma::tensor_map_layout(batch_heads, rows, d, box_rows);
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap map{};
  const CUresult status = encode_tiled()(
      &map, half ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base),
      layout.dims, layout.strides, layout.box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) {
    throw CudaError("cuTensorMapEncodeTiled refused a (" + std::to_string(batch_heads) + ", " + std::to_string(rows) +
                    ", " + std::to_string(d) + ") tensor with boxes of " + std::to_string(box_rows) +
                    " rows (CUresult " + std::to_string(int(status)) + ")");
  }
  return map;
}

}  // namespace common::cuda
