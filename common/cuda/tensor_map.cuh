/// \file tensor_map.cuh
/// \brief Making a TMA tensor map on the host (the layout: tensor_map.hpp).
///
/// `cuTensorMapEncodeTiled` is a driver function; the runtime hands out its address
/// (`cudaGetDriverEntryPointByVersion`), so no program links the driver library itself.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/cuda/tensor_map.hpp"

namespace common::cuda {

/// A tensor map of the (batch_heads, rows, d) array of 16-bit elements at `base`
/// (`half`: fp16, else bf16), copied in boxes of (64, box_rows, 1) with the 128-byte
/// swizzle, rows and columns outside the array filled with zeros (d = 96: the second box's
/// columns 96 … 127). Throws CudaError when the driver refuses it (names the CUresult),
/// InputError when d is not a multiple of 8. A map is a pure function of these arguments:
/// the last few each thread made are kept and handed back when asked for again (the same
/// pointer and shape), without a call into the driver.
CUtensorMap make_tensor_map(const void* base, bool half, int64_t batch_heads, int64_t rows, int64_t d, int box_rows);

/// A tensor map of the (batch_heads, rows, d) fp32 array at `base`, in boxes of (32, box_rows,
/// 1) with the 128-byte swizzle (tensor_map.hpp, accumulator_map_layout): what a TMA reduction
/// adds a tile of a gradient into. Elements outside the array are neither read nor written.
/// Throws as make_tensor_map, InputError when d is not a multiple of 4.
CUtensorMap make_accumulator_map(float* base, int64_t batch_heads, int64_t rows, int64_t d, int box_rows);

}  // namespace common::cuda
