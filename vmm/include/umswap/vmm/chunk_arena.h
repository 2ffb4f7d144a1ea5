// ChunkArena: the vmm engine's state for one device. Every range it hands out is virtual memory
// it reserved, mapped piece by piece to physical memory on the GPU (a pool no larger than the
// budget) or on the host (pinned, HOST_NUMA 0). A range's leading pieces are whole blocks
// (chunks_per_block chunks, up to 16 MiB, one handle each) when blocks are in use, the rest 2 MiB
// chunks (kChunk); a piece is mapped and moved whole, so a large range moves in few mappings
// (a mapping's cost is mostly per mapping: docs/lab/2026-12-01-vmm-driver-calls-and-blocks.md). A
// range is always mapped, so a kernel that touches any byte of it reads correct data: at HBM speed
// from the GPU, over the link from the host (DESIGN.md, "Two engines, one invariant"; issue 38).
//
// Contract:
//   * allocate(): reserves the size rounded up to whole chunks, and with blocks of
//     kRoundedTailBlock chunks or more, the part past the last whole block up to one more block
//     when it is half a block or more (reserved_for(): one mapping for that part instead of four
//     to seven; on an H200, PyTorch's async backend at 50% took 0.75x the time an iteration on
//     GPT-2 small and 0.91x on ViT-L/16, BERT-large level, with this and VmmAllocator keeping
//     freed ranges whatever GPU room they hold, run 218), backs each piece with GPU memory
//     while the pool has room (free, or not yet made: the pool grows on demand up to the budget,
//     rounded down to whole blocks), else with host memory (made on demand up to the host limit,
//     rounded down likewise), maps them and gives the device read/write access. When no whole
//     block can be had on either side for a large piece, the range is backed by chunks only. When
//     the two limits together cannot back the range: CUDA_ERROR_OUT_OF_MEMORY before any driver
//     call. A GPU chunk the driver has no memory for (memory used outside umswap:
//     CUDA_ERROR_OUT_OF_MEMORY from cuMemCreate) falls back to a host chunk; any other driver error
//     fails the allocation. On any failure nothing is left behind: mapped chunks go back to their
//     pools, the range is freed.
//   * release(): the base address allocate() returned; unmaps every chunk, gives GPU and host
//     chunks back to their pools (both keep them made, for reuse; trim() releases the free ones)
//     and frees the range. Anything else: CUDA_ERROR_INVALID_VALUE.
//   * Below, "chunk" is any piece: a whole block is copied, remapped and rolled back as one.
//   * evict() / restore(): every chunk of every live range that overlaps [address, address +
//     length) and sits on the other side moves, whole (a chunk partly in the interval moves too):
//     the chunk's bytes are copied on `stream` to a chunk taken from the other pool, the copies are
//     waited for, and only then each chunk's slot is unmapped, mapped to the new chunk and given
//     access; the old chunk goes back to its pool. restore() takes GPU chunks only while the pool
//     has one; it never evicts anything to make room (that is the planner's job), and says in
//     `Moved::bytes_left` what it could not move. evict() likewise stops at the host limit. A
//     whole block the other side cannot give (its free room is all in groups holding chunks) is
//     left where it is, and the move goes on with the pieces after it.
//     An interval that overlaps no live range: CUDA_ERROR_INVALID_VALUE, nothing done.
//     Contents::undefined: the caller knows nothing has written the interval since its ranges
//     were allocated; its chunks are remapped with no copy (counted in bytes_not_copied, not in
//     the copies and bytes moved).
//   * The caller orders the moves against the program's kernels: a kernel writing a chunk between
//     its copy and its remap would lose that write. For now the arena waits for its copies with a
//     stream synchronize; ordering by events (the program's streams waiting only where the plan
//     needs a range in place) is the later step.
//   * A driver call that fails in the middle of a move rolls that chunk back: its slot is mapped
//     to the chunk that still holds its data (the original: the copy is made before the remap and
//     the original is given back only after the new mapping has access), the chunk taken for it is
//     given back, and the move stops there with the error in `Moved::result` (chunks moved before
//     it stay moved). Only when mapping the original back fails too is the slot left unmapped (a
//     hole): counted in `ArenaStats::holes` and `RangeInfo::unmapped_bytes`, and the next evict()
//     or restore() that covers the slot tries to map it again first.
//   * Counts are exact: the arena maps every chunk itself, so gpu_bytes_in_use() is the bytes of
//     GPU chunks backing live ranges or taken by a staged move (stage() below), never more than
//     the budget.
//   * Errors come back as CUresult; nothing throws except std::bad_alloc. A driver table that is
//     not complete() makes every call answer CUDA_ERROR_NOT_INITIALIZED.
// Thread safety: every member may be called from any thread; one mutex guards the state and is
// held across driver calls. The allocator's threads (the program's) will call allocate() and
// release(); the advisor thread evict(), restore() and trim(); anyone the queries. An evict's
// copies and waits hold the mutex, so an allocation waits for them: releasing it around the
// copies (a per-chunk busy state) comes with the event ordering.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "umswap/vmm/chunk.h"
#include "umswap/vmm/detail/chunk_pool.h"
#include "umswap/vmm/vmm_driver.h"

namespace umswap::vmm {

// What a move's caller knows of the bytes it moves.
enum class Contents {
  keep,       // copied to the other side
  undefined,  // nothing wrote them since allocation: remapped with no copy
};

// What one evict() or restore() did.
struct Moved {
  CUresult result = CUDA_SUCCESS;  // the first error; CUDA_ERROR_OUT_OF_MEMORY when a pool ran dry
  uint64_t bytes = 0;              // bytes copied and remapped (whole chunks)
  uint64_t bytes_left = 0;         // bytes of chunks in the interval that should have moved, didn't
};

class ChunkArena;

// The first half of a move, from stage(): chunks taken and their copies enqueued, no slot changed
// yet. Hand it to commit() or abort(); destroying it (or assigning over it) unhanded aborts it,
// which the arena must outlive. Move-only.
class StagedMove {
 public:
  struct Chunk {
    CUdeviceptr slot = 0;  // the chunk's address in its range
    CUdeviceptr from = 0;  // the chunk behind the slot at stage(), at its pool window
    CUdeviceptr to = 0;    // the chunk it was copied to, at its pool window
    uint64_t bytes = 0;    // a 2 MiB chunk, or a whole block
  };
  StagedMove() = default;
  StagedMove(StagedMove&& other) noexcept;
  StagedMove& operator=(StagedMove&& other) noexcept;
  ~StagedMove();
  StagedMove(const StagedMove&) = delete;
  StagedMove& operator=(const StagedMove&) = delete;

  // The chunks staged, in address order: a caller that checks its copies (a hash of `from` again
  // once the program is held) reads them here.
  std::vector<Chunk> chunks() const;
  // What stage() could not stage (a pool ran dry, a driver call failed) and its first error.
  const Moved& partial() const { return partial_; }
  bool empty() const { return items_.empty(); }

 private:
  friend class ChunkArena;
  struct Item {
    CUdeviceptr slot = 0;
    uint64_t range_id = 0;  // the range it belongs to: a range released and another made at
                            // the same address must not take this copy
    Location from_where = Location::gpu;
    uint32_t from_chunk = 0;
    uint32_t to_chunk = 0;
    CUdeviceptr from = 0, to = 0;
    uint64_t bytes = 0;
    bool whole = false;  // a whole block (a range's large piece)
    bool copied = true;  // false: Contents::undefined, no copy enqueued
  };
  // True when a copy was enqueued for any item (none for Contents::undefined): a wait is needed.
  bool copies_enqueued() const;
  Location to_ = Location::host;
  CUstream stream_ = nullptr;
  std::vector<Item> items_;
  Moved partial_;
  // The stager while the staging is pending (counted by it); null once handed back or moved from.
  ChunkArena* arena_ = nullptr;
};

// One live range, as found by range().
struct RangeInfo {
  CUdeviceptr base = 0;
  uint64_t size = 0;        // as asked of allocate()
  uint64_t reserved = 0;    // whole chunks
  uint64_t gpu_bytes = 0;   // chunks backed by GPU chunks
  uint64_t host_bytes = 0;  // chunks backed by host chunks
  // Holes left by a failed rollback (0 unless the driver failed twice in a row).
  uint64_t unmapped_bytes = 0;
};

struct ArenaStats {
  uint64_t ranges = 0;         // live ranges
  uint64_t chunks_mapped = 0;  // chunk slots of live ranges that are mapped
  uint64_t gpu_chunks_made = 0;
  uint64_t host_chunks_made = 0;
  uint64_t allocations = 0;
  uint64_t releases = 0;
  uint64_t out_of_memory = 0;  // allocate() refused for want of room
  // Chunk copies made and waited for (a copy whose remap then failed counts here, not below).
  uint64_t copies_to_host = 0;
  uint64_t copies_to_gpu = 0;
  // Bytes moved: copied and remapped.
  uint64_t bytes_to_host = 0;
  uint64_t bytes_to_gpu = 0;
  uint64_t bytes_not_copied = 0;         // moved either way with Contents::undefined: remapped only
  uint64_t remaps = 0;                   // slots remapped to another chunk by a move
  uint64_t gpu_create_fallbacks = 0;     // allocate()'s chunks put on the host: no GPU memory
  uint64_t bytes_allocated_on_host = 0;  // allocate()'s pieces backed by host memory, in all
  uint64_t failures = 0;                 // driver calls that failed (the rollbacks' included)
  uint64_t holes = 0;                    // slots unmapped now (see the contract)
  uint64_t block_bytes = 0;              // a range's large pieces (kChunk: none)
  uint64_t pieces_whole = 0;             // large pieces allocated, in all
  // Time inside commit(): waiting for the staged copies, and remapping the slots.
  uint64_t copy_wait_ns = 0;
  uint64_t remap_ns = 0;
};

class ChunkArena {
 public:
  // No driver call is made here; the pools' windows are reserved on first use. Physical memory
  // is made in blocks of `chunks_per_block` chunks (a power of two up to 32; 1: every piece is a
  // chunk): the GPU pool holds gpu_limit_bytes rounded down to whole blocks, the host likewise.
  ChunkArena(const VmmDriver& driver, CUdevice device, uint64_t gpu_limit_bytes,
             uint64_t host_limit_bytes, uint32_t chunks_per_block = 1);
  // The engine's block for a GPU pool of `gpu_limit_bytes`: the largest of 2 to kLargestBlock
  // bytes that leaves the pool at least kMinBlocks blocks (what rounding the budget down to whole
  // blocks loses stays under 1/kMinBlocks of it), in chunks.
  static uint32_t chunks_per_block_for(uint64_t gpu_limit_bytes);
  // 16 MiB, not 32: with 32 MiB blocks the GPU pool, always full under a budget, turned free
  // chunks into blocks and back (release, create, map) far more often; ViT-L/16 at 50% took 25%
  // less time an iteration at 16 (run 191, docs/lab/2026-12-01-vmm-driver-calls-and-blocks.md).
  static constexpr uint64_t kLargestBlock = uint64_t{16} << 20;
  static constexpr uint64_t kMinBlocks = 32;
  // Blocks of at least this many chunks take a range's tail of half a block or more whole
  // (reserved_for()).
  static constexpr uint32_t kRoundedTailBlock = 8;
  // Releases every live range and every chunk.
  ~ChunkArena();
  ChunkArena(const ChunkArena&) = delete;
  ChunkArena& operator=(const ChunkArena&) = delete;

  CUresult allocate(uint64_t bytes, CUdeviceptr* address);
  // allocate() at addresses the caller reserved (the program's own cuMemAddressReserve, for a
  // handle engine vmm virtualizes): exactly `bytes` (no reserved_for() rounding: the size is the
  // program's), `address` and `bytes` whole chunks, sharing no byte with a live range (else
  // CUDA_ERROR_INVALID_VALUE, nothing done). release() then leaves the addresses reserved, as
  // does a failure.
  CUresult allocate_at(CUdeviceptr address, uint64_t bytes);
  CUresult release(CUdeviceptr address);
  Moved evict(CUdeviceptr address, uint64_t length, CUstream stream,
              Contents contents = Contents::keep);
  Moved restore(CUdeviceptr address, uint64_t length, CUstream stream,
                Contents contents = Contents::keep);

  // A move in two halves, so that the program runs during the copies and is held only for the
  // remaps (docs/lab/2026-11-29-vmm-window.md). evict() and restore() are stage() then commit().
  //   * stage(): takes a chunk on the `to` side for every chunk of the interval's live ranges on
  //     the other side and enqueues its copy on `stream`, from the old chunk's pool window to the
  //     new one's, by `copy` (dst, src, bytes, stream) when given, else cuMemcpyDtoDAsync (none
  //     with Contents::undefined); no
  //     wait, no slot changes. Holes in the interval are mapped again first, as by a move. An
  //     interval that overlaps no live range: partial().result CUDA_ERROR_INVALID_VALUE.
  //   * commit(): waits for `stream` (if stage() enqueued any copy), then remaps each staged slot
  //     that still maps the chunk it mapped at stage() in the same range (one released meanwhile,
  //     or moved by another move, is skipped: its new chunk goes back, counted in bytes_left); the
  //     caller holds every access to the interval across it (a kernel reaching a slot being
  //     remapped is an illegal address, and a write to an old chunk after its copy is lost unless
  //     the caller copies it again). Returns the whole move's Moved, stage()'s shortfall included.
  //     The StagedMove is empty after it.
  //   * abort(): gives every staged chunk back; nothing remapped.
  using Copier =
      std::function<CUresult(CUdeviceptr dst, CUdeviceptr src, uint64_t bytes, CUstream stream)>;
  StagedMove stage(CUdeviceptr address, uint64_t length, Location to, CUstream stream,
                   const Copier& copy = {}, Contents contents = Contents::keep);
  Moved commit(StagedMove& staged);
  void abort(StagedMove& staged);
  // Releases the free chunks of both pools; returns the bytes released.
  uint64_t trim();

  // The GPU pool: no GPU chunk is made past gpu_limit_bytes(), gpu_capacity_bytes() (the
  // constructor's) less what set_gpu_limit_bytes() took away (never above the capacity). Chunks
  // made before it was lowered stay until trim_to_limit() releases the free ones past it. While
  // a staged move is between its stage() and its commit() or abort() (its copy may read a chunk
  // that became free, through the pool's window), nothing free is released: trim() and
  // trim_to_limit() do nothing and the pools make room only from what is not made yet.
  uint64_t gpu_capacity_bytes() const { return gpu_capacity_ * block_bytes(); }
  uint64_t block_bytes() const { return uint64_t{per_} * kChunk; }
  // The bytes allocate() reserves for a range of `bytes` (see the contract; reserved_for() of
  // its own answer is the same).
  uint64_t reserved_for(uint64_t bytes) const;
  uint64_t gpu_limit_bytes() const;
  void set_gpu_limit_bytes(uint64_t bytes);
  uint64_t trim_to_limit();  // bytes released
  uint64_t host_limit_bytes() const { return host_capacity_ * block_bytes(); }
  uint64_t gpu_bytes_in_use() const;
  uint64_t host_bytes_in_use() const;
  // Made, in use or free (what the process holds).
  uint64_t gpu_bytes_held() const;
  uint64_t host_bytes_held() const;
  // The live range holding `address` (any byte of its reserved chunks).
  std::optional<RangeInfo> range(CUdeviceptr address) const;
  // Where the chunk holding `address` lives; nullopt outside live ranges and for a hole.
  std::optional<Location> chunk_location(CUdeviceptr address) const;
  // True when the live range holding `address` is wholly on the GPU.
  bool on_gpu(CUdeviceptr address) const;
  // True when the GPU pool could take every piece of the live range holding `address` that is
  // not on the GPU now (its whole blocks and its chunks; bytes free in the pool are not enough
  // when no whole block can be had). True outside live ranges (nothing to take).
  bool fits_on_gpu(CUdeviceptr address) const;
  // Bytes allocate() could still back, GPU and host pools together (whole chunks; the pools' free
  // room, made or not).
  uint64_t bytes_available() const;
  // True when allocate(bytes) would back every piece of a new range with GPU chunks now.
  bool fits_new_on_gpu(uint64_t bytes) const;
  ArenaStats stats() const;
  // stats()'s bytes_to_gpu and bytes_to_host alone (no walk over the ranges).
  std::pair<uint64_t, uint64_t> bytes_moved() const;

 private:
  struct Slot {
    Location where = Location::gpu;
    uint32_t chunk = 0;  // index in the pool of `where`
    bool mapped = false;
  };
  // A range's pieces: `large` whole blocks first, then 2 MiB chunks; one Slot each.
  struct Range {
    uint64_t size = 0;
    uint64_t id = 0;  // unique in the arena's life
    uint64_t reserved = 0;
    uint64_t block = kChunk;
    uint64_t large = 0;
    bool owns_addresses = true;  // reserved by allocate() (false: allocate_at()'s caller's)
    std::vector<Slot> slots;
    bool whole(uint64_t i) const { return i < large; }
    uint64_t bytes(uint64_t i) const { return i < large ? block : kChunk; }
    uint64_t offset(uint64_t i) const {
      return i < large ? i * block : large * block + (i - large) * kChunk;
    }
    // The piece holding byte `off` of the range.
    uint64_t piece_at(uint64_t off) const {
      const uint64_t big = large * block;
      return off < big ? off / block : large + (off - big) / kChunk;
    }
  };
  using RangeMap = std::map<CUdeviceptr, Range>;

  detail::ChunkPool& pool(Location where) { return where == Location::gpu ? gpu_ : host_; }
  CUresult unmap_range(CUdeviceptr base, Range& range);
  // allocate()'s work, mutex_ held: at `at` when not 0 (checked by allocate_at()), else at
  // addresses it reserves.
  CUresult allocate_locked(uint64_t bytes, CUdeviceptr at, CUdeviceptr* address);
  // The live range holding `address` (any byte of its reserved chunks), or end().
  RangeMap::const_iterator find(CUdeviceptr address) const;
  RangeMap::iterator find(CUdeviceptr address);
  Moved move(CUdeviceptr address, uint64_t length, CUstream stream, Location to, Contents contents);
  void give_back(StagedMove& staged);  // mutex_ held
  // Maps the range's pieces from the first, `large` of them whole blocks; stops at the first
  // failure (the pieces mapped stay in range.slots, for unmap_range()).
  CUresult back(CUdeviceptr base, Range& range, uint64_t large);
  CUresult take(Location where, bool whole, uint32_t* chunk);
  void give(Location where, uint32_t chunk, bool whole);
  CUresult remap(CUdeviceptr at, uint64_t bytes, bool whole, Slot& slot, Location to,
                 uint32_t chunk);
  CUresult map_slot(CUdeviceptr at, uint64_t bytes, Location where, uint32_t chunk);
  CUresult count(CUresult result);

  VmmDriver driver_;
  CUdevice device_;
  uint32_t per_;           // chunks a block
  uint64_t gpu_capacity_;  // blocks
  uint64_t host_capacity_;
  mutable std::mutex mutex_;
  detail::ChunkPool gpu_;
  detail::ChunkPool host_;
  RangeMap ranges_;  // by base address
  uint64_t next_range_id_ = 1;
  // Stagings not yet committed or aborted: while any is, the pools release nothing free (a
  // staged copy may read a chunk that became free), and trims do nothing.
  uint64_t staged_ = 0;
  void settle(StagedMove& staged);  // mutex_ held: no longer pending
  ArenaStats stats_;
};

}  // namespace umswap::vmm
