/// \file tensor_map.cu
/// \brief make_tensor_map: the driver's cuTensorMapEncodeTiled, reached through the runtime.
#include "common/cuda/tensor_map.cuh"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000

#include <string>

#include "common/cuda/cuda_check.cuh"
#include "common/host_timing.hpp"

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

/// What a tensor map is made from: the same key always encodes the same 128 bytes.
struct MapKey {
  const void* base;
  CUtensorMapDataType type;
  int64_t batch_heads, rows, d;
  int box_rows;
  bool operator==(const MapKey& o) const {
    return base == o.base && type == o.type && batch_heads == o.batch_heads && rows == o.rows && d == o.d &&
           box_rows == o.box_rows;
  }
};

/// The last few maps this thread encoded. A model calls attention with the same shapes over
/// and over, and PyTorch's caching allocator hands the same addresses back, so a launch from
/// Python mostly finds its three maps here instead of asking the driver to encode them again.
/// Per thread: no lock, and nothing shared between threads that launch at once.
class MapCache {
 public:
  const CUtensorMap* find(const MapKey& key) const {
    for (int i = 0; i < used_; ++i) {
      if (entries_[i].key == key) return &entries_[i].map;
    }
    return nullptr;
  }
  void add(const MapKey& key, const CUtensorMap& map) {
    entries_[next_] = {key, map};  // the oldest goes
    next_ = (next_ + 1) % kEntries;
    if (used_ < kEntries) ++used_;
  }

 private:
  static constexpr int kEntries = 16;  // Q, K and V of a few layers' shapes
  struct Entry {
    MapKey key;
    CUtensorMap map;
  };
  Entry entries_[kEntries]{};
  int used_ = 0, next_ = 0;
};

/// The map of `key` with `layout`: from the cache, or encoded by the driver and kept.
CUtensorMap tensor_map(const MapKey& key, const tma::TensorMapLayout& layout) {
  thread_local MapCache cache;
  if (const CUtensorMap* known = cache.find(key)) return *known;
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap map{};
  const CUresult status =
      encode_tiled()(&map, key.type, 3, const_cast<void*>(key.base), layout.dims, layout.strides, layout.box,
                     element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) {
    throw CudaError("cuTensorMapEncodeTiled refused a (" + std::to_string(key.batch_heads) + ", " +
                    std::to_string(key.rows) + ", " + std::to_string(key.d) + ") tensor with boxes of " +
                    std::to_string(key.box_rows) + " rows (CUresult " + std::to_string(int(status)) + ")");
  }
  cache.add(key, map);
  return map;
}

}  // namespace

CUtensorMap make_tensor_map(const void* base, bool half, int64_t batch_heads, int64_t rows, int64_t d, int box_rows) {
  const HostPhase timed("tensor maps (make_tensor_map)");
  if (d % 8 != 0) {
    throw InputError("head_dim " + std::to_string(d) + " is not a multiple of 8 (TMA's rows are whole 16 bytes)");
  }
  const MapKey key{
      base, half ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, batch_heads, rows, d, box_rows};
  return tensor_map(key, tma::tensor_map_layout(batch_heads, rows, d, box_rows));
}

CUtensorMap make_accumulator_map(float* base, int64_t batch_heads, int64_t rows, int64_t d, int box_rows) {
  const HostPhase timed("tensor maps (make_tensor_map)");
  if (d % 4 != 0) {
    throw InputError("head_dim " + std::to_string(d) + " is not a multiple of 4 (TMA's rows are whole 16 bytes)");
  }
  const MapKey key{base, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, batch_heads, rows, d, box_rows};
  return tensor_map(key, tma::accumulator_map_layout(batch_heads, rows, d, box_rows));
}

}  // namespace common::cuda
