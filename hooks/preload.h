// The preload library's process-wide state: options, the real driver, the registry and the
// allocator. Created on first use, never destroyed (hooks may run during exit).
//
// Contract for hooks: call preload() first; use redirecting() to decide whether to hand the call
// to the allocator or to the real function. Nothing here throws; failures degrade to passthrough
// with one warning.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "real_driver.h"
#include "umswap/allocator/managed_allocator.h"
#include "umswap/allocator/program_mappings.h"
#include "umswap/allocator/registry.h"
#include "umswap/allocator/torch_blocks.h"
#include "umswap/allocator/virtual_handles.h"
#include "umswap/allocator/vmm_allocator.h"
#include "umswap/core/options.h"

namespace umswap {

namespace advisor {
class Advisor;
}
class VmmObserver;

class Preload {
 public:
  Preload();

  const Options& options() const { return options_; }
  // Real driver functions; loads libcuda on first use. nullptr when there is no driver.
  const RealDriver* driver();
  // True when allocations are to become managed memory: engine um, a redirecting mode, a driver,
  // not a forked child (CUDA cannot be used after fork), and the allocator could be set up.
  bool redirecting();
  ManagedAllocator& allocator();  // only valid when redirecting()
  // Engine vmm's allocator (vmm_engine.h) when allocations are to go to it: engine vmm, a
  // redirecting mode, a driver, not a forked child, and the engine could be set up; else nullptr
  // (at once, with no side effect, under engine um).
  VmmAllocator* vmm();
  Registry& registry() { return registry_; }
  // The blocks of PyTorch's caching allocator (torch_blocks.h); only valid when redirecting().
  TorchBlocks& torch_blocks() { return *torch_blocks_; }
  // The GPU memory the program maps itself (cuMemCreate), counted against the budget.
  ProgramMappings& program_mappings() { return program_mappings_; }
  // Engine vmm's handles for the program's own cuMemCreate (virtual_handles.h).
  VirtualHandles& virtual_handles() { return virtual_handles_; }
  // Call-site identity of the current allocation request (umswap's own frames skipped).
  CallSiteId call_site() const;

  // The runtime API in flight on this thread, if a runtime hook is active; else `fallback`.
  static AllocApi api_or(AllocApi fallback);

  // The process allocated through umswap's hooks or made a traced CUDA call.
  bool used_cuda() const;
  // The error the current context holds once its GPU work failed (an illegal address, ...), from
  // an event recorded on a stream of its own and queried, which never waits; CUDA_SUCCESS when it
  // holds none, or when there is no context or driver left to ask.
  CUresult context_error() const;
  void mark_forked_child() { forked_child_.store(true, std::memory_order_relaxed); }
  // A kernel launch that asked to overlap the one ahead of it went in stream order
  // (launch_in_order.h); counted for the stats file. Any thread.
  void note_launch_in_order() { launches_in_order_.fetch_add(1, std::memory_order_relaxed); }
  void write_stats_at_exit();

 private:
  void load_driver_once();
  void create_allocator_once();
  void configure_slabs();
  // PyTorch's caching allocator's blocks: their lifetimes to the tracer, and with planned
  // discards their dead pages dropped as the slabs' are (torch_blocks.h). After configure_slabs.
  void configure_torch_drops();
  void start_tracer_once();
  void start_advisor(advisor::Advisor* advisor);
  // Whether the advisor is to run: a mode that advises, under engine um (under engine vmm it
  // would call managed-memory functions on ranges that are not managed memory).
  bool wants_advisor() const { return advises(options_.mode) && options_.engine == Engine::um; }

  Options options_;
  std::vector<std::string> option_warnings_;  // printed at first CUDA use, not in every process
  Registry registry_;
  ProgramMappings program_mappings_;
  VirtualHandles virtual_handles_;
  VmmObserver* vmm_observer_ = nullptr;  // engine vmm's moves, set once by start_tracer_once()
  std::once_flag driver_once_;
  RealDriver driver_;
  bool driver_ok_ = false;
  std::once_flag allocator_once_;
  std::atomic<bool> planned_discards_{false};  // slab frees discard what the advisor drops
  ManagedAllocator* allocator_ = nullptr;      // never freed: hooks may run during exit
  TorchBlocks* torch_blocks_ = nullptr;        // never freed, as allocator_
  // The frees' discards ordered with the advisor's migrations (drop_order.h); made once by
  // drop_order(), never freed; null without the driver's event functions.
  std::once_flag drop_order_once_;
  DropOrder* drop_order_ = nullptr;
  DropOrder* drop_order();
  std::once_flag vmm_once_;
  VmmAllocator* vmm_ = nullptr;  // never freed, as allocator_
  std::atomic<bool> forked_child_{false};
  std::atomic<bool> allocated_{false};  // an allocation hook ran (the process uses CUDA memory)
  std::atomic<uint64_t> launches_in_order_{0};
  // The context's error at exit (context_error(), asked by an exit handler registered when the
  // allocator is made, while the runtime still holds the context): the stats' flight_recorder.
  void check_context_at_exit_once();
  std::once_flag exit_check_once_;
  std::atomic<int> exit_error_{0};
  bool wants_tracer_ = false;         // decided once from the options
  std::atomic<int> tracer_state_{0};  // 0 not started, 1 starting, 2 done (running or not)
};

Preload& preload();

// The file name (no directory) of the loaded object that holds `address`; empty if none.
std::string_view module_of(const void* address);
// True when `caller` (a return address) is in libumswap itself or in a profiling or management
// library (CUPTI, NVML, NVPerf): such callers get the real driver and CUPTI functions.
bool caller_wants_real(const void* caller);

// Set by runtime hooks around the real runtime call, read by the driver hooks below it.
class RuntimeApiScope {
 public:
  explicit RuntimeApiScope(AllocApi api);
  ~RuntimeApiScope();
  RuntimeApiScope(const RuntimeApiScope&) = delete;
  RuntimeApiScope& operator=(const RuntimeApiScope&) = delete;

  // A driver hook below left the allocation to the driver on purpose (graph capture).
  static void note_left_to_driver();
  // Whether note_left_to_driver() was called within this scope.
  bool left_to_driver() const;

 private:
  int previous_;
  bool previous_left_;
};

}  // namespace umswap
