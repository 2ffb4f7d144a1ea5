// PrefetchMovers: host threads that keep moving random 2 MiB-aligned pieces of one managed
// allocation to the host and back, each with cudaMemPrefetchAsync on a stream of its own,
// unordered with all other work: what the advisor's migrations are to the program's streams.
// For the probes that ask whether managed memory stays exact under such moves
// (prefetch_race_probe, discard_race_probe). A CUDA error ends the program (cuda_check.h).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "cuda_check.h"

class PrefetchMovers {
 public:
  static constexpr size_t kPage = size_t{1} << 21;

  // `threads` movers over [base, base + bytes) (bytes a multiple of kPage), each piece 1 to
  // `most_pages` pages, thread t seeded with seed + t; each mover waits for its stream every 32
  // moves, so that its queue stays short.
  PrefetchMovers(void* base, size_t bytes, int threads, size_t most_pages, uint64_t seed) {
    int device = 0;
    CHECK(cudaGetDevice(&device));
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([=, this] {
        CHECK(cudaSetDevice(device));
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        std::mt19937_64 rng(seed + static_cast<uint64_t>(t));
        const size_t pages = bytes / kPage;
        while (!done_.load()) {
          if (paused_.load()) {
            CHECK(cudaStreamSynchronize(s));
            parked_.fetch_add(1);
            while (paused_.load() && !done_.load()) std::this_thread::yield();
            parked_.fetch_sub(1);
            continue;
          }
          const size_t first = rng() % pages, count = 1 + rng() % most_pages;
          cudaMemLocation where{};
          where.type = (rng() & 1) ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
          where.id = where.type == cudaMemLocationTypeHost ? 0 : device;
          CHECK(cudaMemPrefetchAsync(static_cast<char*>(base) + first * kPage,
                                     std::min(count, pages - first) * kPage, where, 0, s));
          if ((moves_.fetch_add(1) & 31) == 31) CHECK(cudaStreamSynchronize(s));
        }
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaStreamDestroy(s));
      });
    }
  }
  PrefetchMovers(const PrefetchMovers&) = delete;
  PrefetchMovers& operator=(const PrefetchMovers&) = delete;
  ~PrefetchMovers() { stop(); }

  // Stops every mover once its current move is queued, and waits for their streams.
  void stop() {
    done_.store(true);
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  uint64_t moves() const { return moves_.load(); }

  // pause(): returns once every mover has queued its last move and seen its stream finish, so
  // that no migration of the allocation runs until resume().
  void pause() {
    paused_.store(true);
    while (parked_.load() < static_cast<int>(threads_.size())) std::this_thread::yield();
  }
  void resume() { paused_.store(false); }

 private:
  std::atomic<bool> done_{false}, paused_{false};
  std::atomic<int> parked_{0};
  std::atomic<uint64_t> moves_{0};
  std::vector<std::thread> threads_;
};
