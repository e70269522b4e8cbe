/// \file step33_backward_hopper/tile_scheduler.hpp
/// \brief The persistent grid's tile scheduler: which (batch·head, query tile) a block takes next.
///
/// A persistent kernel starts as many blocks as the GPU holds at once, G = SMs × blocks
/// per SM, and each block loops over work tiles until none is left. A work tile is one
/// query tile i of one head bh: T_r · B·H of them, numbered n = 0, 1, … in the order
/// they should start (`at`). Block b takes tile b first; after that,
///  - **static** (full attention, every tile costs T_c K/V tiles): tile n + G, n + 2G, …;
///  - **dynamic** (causal, tile i costs i + 1 of them): the next number nobody has
///    claimed, G + the old value of a counter in global memory that each block adds 1
///    to (`atomicAdd`), so a block whose tiles were short takes more of them.
/// Either way each tile is computed by one block, whole, in the same order of K/V tiles:
/// which block takes it changes nothing in O or L.
///
/// Pure arithmetic on the host and the device, so the CPU tests check it
/// (test_scheduler.cpp): every tile taken once, in the order promised.
#pragma once

#include "common/cuda/fragments.hpp"  // FLASH_HOST_DEVICE

namespace step33 {

/// A work tile: query tile `i` of batch·head `bh`.
struct WorkTile {
  int bh;  ///< batch·head, 0 … B·H − 1
  int i;  ///< query tile, 0 … T_r − 1
};

//! [scheduler]
/// The order of the work tiles and the static scheduler's stride. Tile numbers are
/// int: T_r · B·H ≥ 2³¹ tiles of 64 or more rows would be a Q of 2³⁷ rows, 16 TiB at d = 64.
struct TileScheduler {
  int Tr;  ///< T_r: query tiles per head
  int batch_heads;  ///< B·H
  int grid;  ///< G: blocks in the persistent grid
  bool longest_first;  ///< true: the longest tile of every head first; false: head by head
  bool dynamic;  ///< true: tiles after the first come from the counter (causal)

  /// Work tiles in all, T_r · B·H.
  FLASH_HOST_DEVICE int tiles() const { return Tr * batch_heads; }

  /// Tile number n in the order tiles start. Head by head: one head's tiles side by
  /// side, sharing its K and V in L2, its last query tile (the longest when causal)
  /// first. Longest first: query tile T_r − 1 of every head, then T_r − 2, …
  FLASH_HOST_DEVICE WorkTile at(int n) const {
    return longest_first ? WorkTile{n % batch_heads, Tr - 1 - n / batch_heads} : WorkTile{n / Tr, Tr - 1 - n % Tr};
  }

  /// The tile after n for block `block`'s loop: static, n + G; dynamic, G + `claimed`,
  /// the counter's value before this block's atomicAdd. A number ≥ tiles() means done.
  FLASH_HOST_DEVICE int next(int n, int claimed) const { return dynamic ? grid + claimed : n + grid; }
};
//! [scheduler]

}  // namespace step33
