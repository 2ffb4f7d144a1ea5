// Engine vmm's window, copies and remaps (issue 38): a move copies every chunk of a range to the
// other side and, once the copies are done, remaps each slot (cuMemUnmap, cuMemMap,
// cuMemSetAccess). Alone, both cost about the same per MiB (run 157: copies 18, remaps 20 us/MiB),
// one after the other. This probe times four ways of doing the same move of one range:
//
//   serial     every copy, one stream synchronize, then every slot remapped (today's commit());
//   pipelined  an event after each group of --group pieces' copies; the host waits for a group's
//              event and remaps its slots while the later groups copy;
//   batched    as serial, but one cuMemUnmap and one cuMemSetAccess over each group's contiguous
//              slots (one cuMemMap per piece still: a piece is its own handle);
//   both       pipelined and batched;
//   alloc      not a move: ranges made and released as engine vmm's allocate() and release() do
//              (reserve, map each piece, one set-access; unmap each piece, free), 20 of each size
//              on each side, the host time of each phase in us per call;
//   churn      not a move: physical memory made and released as engine vmm's pool does when it
//              turns free chunks into a block or back (create, map at a window slot, set-access;
//              unmap, release), 20 of each size on each side, us per call of each phase.
//
// Each way moves the range to the host and back --reps times; printed: the median ms of each
// direction, split into copy wait and remap, and us/MiB of the whole move. After every move the
// range's words are checked against what was written (0 expected wrong).
//
// usage: remap_pipeline_probe [--range-mib M] [--piece-mib P] [--group G] [--reps N] [MODE...]
// Memory: M MiB on the GPU and M MiB pinned host through cuMemCreate (default 1024 MiB, 16 MiB
// pieces, groups of 4); no managed memory.
#include <cuda.h>

#include <cstring>
#include <string>

#include "vmm_probe_common.cuh"

namespace {

using probe::kMiB;

__global__ void fill(uint32_t* p, uint64_t words, uint32_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words;
       i += uint64_t(gridDim.x) * blockDim.x) {
    p[i] = seed ^ static_cast<uint32_t>(i * 2654435761u);
  }
}

__global__ void check(const uint32_t* p, uint64_t words, uint32_t seed, unsigned long long* bad) {
  unsigned long long n = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words;
       i += uint64_t(gridDim.x) * blockDim.x) {
    n += p[i] != (seed ^ static_cast<uint32_t>(i * 2654435761u));
  }
  if (n) atomicAdd(bad, n);
}

struct Config {
  uint64_t range = 1024 * kMiB;
  uint64_t piece = 16 * kMiB;
  uint64_t group = 4;
  int reps = 5;
};

struct Side {
  std::vector<CUmemGenericAllocationHandle> handles;
  CUdeviceptr window = 0;  // every handle mapped here for good: the copies' source and target
};

struct Timing {
  std::vector<double> total, wait, remap;
};

class Probe {
 public:
  Probe(const Config& c, CUdevice device) : c_(c), pieces_(c.range / c.piece) {
    access_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access_.location.id = device;
    access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    make(gpu_, CU_MEM_LOCATION_TYPE_DEVICE, device);
    make(host_, CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
    CU(cuMemAddressReserve(&range_, c.range, c.piece, 0, 0));
    for (uint64_t i = 0; i < pieces_; ++i) CU(cuMemMap(at(i), c.piece, 0, gpu_.handles[i], 0));
    CU(cuMemSetAccess(range_, c.range, &access_, 1));
    CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    events_.resize(pieces_);
    for (CUevent& e : events_) CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CU(cuMemAlloc(&bad_, sizeof(unsigned long long)));
    fill<<<264, 512>>>(reinterpret_cast<uint32_t*>(range_), c.range / 4, kSeed);
    CU(cuCtxSynchronize());
  }

  // Moves the range to `to_host` by `mode`; returns false when a batched call was refused.
  bool move(const std::string& mode, bool to_host, Timing& t) {
    const bool pipelined = mode == "pipelined" || mode == "both";
    const bool batched = mode == "batched" || mode == "both";
    Side& from = to_host ? gpu_ : host_;
    Side& to = to_host ? host_ : gpu_;
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < pieces_; ++i) {
      CU(cuMemcpyDtoDAsync(to.window + i * c_.piece, from.window + i * c_.piece, c_.piece,
                           stream_));
      if (pipelined && ((i + 1) % c_.group == 0 || i + 1 == pieces_))
        CU(cuEventRecord(events_[i], stream_));
    }
    if (!pipelined) CU(cuStreamSynchronize(stream_));
    double wait = pipelined ? 0 : probe::ms_since(start), remap = 0;
    for (uint64_t g = 0; g < pieces_; g += c_.group) {
      const uint64_t n = std::min(c_.group, pieces_ - g);
      if (pipelined) {
        const auto w = std::chrono::steady_clock::now();
        CU(cuEventSynchronize(events_[g + n - 1]));
        wait += probe::ms_since(w);
      }
      const auto r = std::chrono::steady_clock::now();
      if (batched) {
        if (cuMemUnmap(at(g), n * c_.piece) != CUDA_SUCCESS) return false;
        for (uint64_t i = g; i < g + n; ++i) CU(cuMemMap(at(i), c_.piece, 0, to.handles[i], 0));
        CU(cuMemSetAccess(at(g), n * c_.piece, &access_, 1));
      } else {
        for (uint64_t i = g; i < g + n; ++i) {
          CU(cuMemUnmap(at(i), c_.piece));
          CU(cuMemMap(at(i), c_.piece, 0, to.handles[i], 0));
          CU(cuMemSetAccess(at(i), c_.piece, &access_, 1));
        }
      }
      remap += probe::ms_since(r);
    }
    t.total.push_back(probe::ms_since(start));
    t.wait.push_back(wait);
    t.remap.push_back(remap);
    return true;
  }

  // A range's life as engine vmm's allocate() and release() make it, `pieces` pieces of the
  // handles of `side` (`handles` when given) mapped at a fresh reservation: reserve, map each
  // piece, one set-access, then unmap each piece and free the reservation. Adds the host time of
  // each phase (reserve, map, access, unmap, free) in ms to `t`.
  void life(bool host, uint64_t pieces, uint64_t piece,
            const std::vector<CUmemGenericAllocationHandle>* handles, double t[5]) {
    const std::vector<CUmemGenericAllocationHandle>& h =
        handles ? *handles : (host ? host_ : gpu_).handles;
    const uint64_t bytes = pieces * piece;
    CUdeviceptr va = 0;
    auto now = [] { return std::chrono::steady_clock::now(); };
    auto t0 = now();
    CU(cuMemAddressReserve(&va, bytes, piece, 0, 0));
    t[0] += probe::ms_since(t0);
    t0 = now();
    for (uint64_t i = 0; i < pieces; ++i) CU(cuMemMap(va + i * piece, piece, 0, h[i], 0));
    t[1] += probe::ms_since(t0);
    t0 = now();
    CU(cuMemSetAccess(va, bytes, &access_, 1));
    t[2] += probe::ms_since(t0);
    t0 = now();
    for (uint64_t i = 0; i < pieces; ++i) CU(cuMemUnmap(va + i * piece, piece));
    t[3] += probe::ms_since(t0);
    t0 = now();
    CU(cuMemAddressFree(va, bytes));
    t[4] += probe::ms_since(t0);
  }
  // 2 MiB handles of their own on each side (for ranges smaller than a piece).
  std::vector<CUmemGenericAllocationHandle> small_handles(bool host, uint64_t n) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = host ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = host ? 0 : access_.location.id;
    std::vector<CUmemGenericAllocationHandle> h(n);
    for (auto& x : h) CU(cuMemCreate(&x, 2 * kMiB, &prop, 0));
    return h;
  }
  uint64_t pieces() const { return pieces_; }

  // Physical memory's life as the pool makes it: create `bytes` on `host` or the GPU, map it at
  // a window slot, give access; then unmap and release. Adds ms per phase to `t` (create, map
  // and access, unmap, release).
  void churn(bool host, uint64_t bytes, double t[4]) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = host ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = host ? 0 : access_.location.id;
    CUdeviceptr va = 0;
    CU(cuMemAddressReserve(&va, bytes, bytes, 0, 0));
    auto now = [] { return std::chrono::steady_clock::now(); };
    CUmemGenericAllocationHandle h = 0;
    auto t0 = now();
    CU(cuMemCreate(&h, bytes, &prop, 0));
    t[0] += probe::ms_since(t0);
    t0 = now();
    CU(cuMemMap(va, bytes, 0, h, 0));
    CU(cuMemSetAccess(va, bytes, &access_, 1));
    t[1] += probe::ms_since(t0);
    t0 = now();
    CU(cuMemUnmap(va, bytes));
    t[2] += probe::ms_since(t0);
    t0 = now();
    CU(cuMemRelease(h));
    t[3] += probe::ms_since(t0);
    CU(cuMemAddressFree(va, bytes));
  }

  unsigned long long wrong() {
    CU(cuMemsetD8(bad_, 0, sizeof(unsigned long long)));
    check<<<264, 512>>>(reinterpret_cast<const uint32_t*>(range_), c_.range / 4, kSeed,
                        reinterpret_cast<unsigned long long*>(bad_));
    unsigned long long n = 0;
    CU(cuMemcpyDtoH(&n, bad_, sizeof n));
    return n;
  }

 private:
  static constexpr uint32_t kSeed = 0x5eed1234u;
  CUdeviceptr at(uint64_t i) const { return range_ + i * c_.piece; }
  void make(Side& s, CUmemLocationType type, int id) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = type;
    prop.location.id = id;
    CU(cuMemAddressReserve(&s.window, c_.range, c_.piece, 0, 0));
    s.handles.resize(pieces_);
    for (uint64_t i = 0; i < pieces_; ++i) {
      CU(cuMemCreate(&s.handles[i], c_.piece, &prop, 0));
      CU(cuMemMap(s.window + i * c_.piece, c_.piece, 0, s.handles[i], 0));
    }
    CU(cuMemSetAccess(s.window, c_.range, &access_, 1));
  }

  Config c_;
  uint64_t pieces_;
  CUmemAccessDesc access_{};
  Side gpu_, host_;
  CUdeviceptr range_ = 0, bad_ = 0;
  CUstream stream_ = nullptr;
  std::vector<CUevent> events_;
};

uint64_t mib_arg(const char* s) {
  return std::strtoull(s, nullptr, 10) * kMiB;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  std::vector<std::string> modes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--range-mib" && more) {
      c.range = mib_arg(argv[++i]);
    } else if (a == "--piece-mib" && more) {
      c.piece = mib_arg(argv[++i]);
    } else if (a == "--group" && more) {
      c.group = std::max<uint64_t>(1, std::strtoull(argv[++i], nullptr, 10));
    } else if (a == "--reps" && more) {
      c.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "serial" || a == "pipelined" || a == "batched" || a == "both" || a == "alloc" ||
               a == "churn") {
      modes.push_back(a);
    } else {
      std::fprintf(stderr,
                   "usage: remap_pipeline_probe [--range-mib M] [--piece-mib P] [--group G] "
                   "[--reps N] [serial|pipelined|batched|both|alloc|churn...]\n");
      return 2;
    }
  }
  if (c.piece < 2 * kMiB || c.piece % (2 * kMiB) != 0 || c.range < c.piece) {
    std::fprintf(stderr,
                 "remap_pipeline_probe: the piece must be whole 2 MiB chunks, the range "
                 "at least one piece\n");
    return 2;
  }
  c.range = c.range / c.piece * c.piece;
  if (modes.empty()) modes = {"serial", "pipelined", "batched", "both", "alloc"};
  CUdevice device;
  probe::primary_context(&device);
  Probe p(c, device);
  const double mib = static_cast<double>(c.range) / kMiB;
  std::printf("range %.0f MiB in %llu MiB pieces, groups of %llu, %d reps\n", mib,
              static_cast<unsigned long long>(c.piece / kMiB),
              static_cast<unsigned long long>(c.group), c.reps);
  std::printf("%-10s %-8s %9s %9s %9s %8s %6s\n", "mode", "to", "total ms", "wait ms", "remap ms",
              "us/MiB", "wrong");
  for (const std::string& mode : modes) {
    if (mode == "churn") {
      std::printf("%-6s %8s %6s %9s %9s %9s %9s\n", "churn", "MiB", "side", "create", "map+acc",
                  "unmap", "release");
      for (const bool host : {false, true}) {
        for (const uint64_t bytes : {2 * kMiB, 32 * kMiB}) {
          double t[4] = {0, 0, 0, 0};
          constexpr int kLives = 20;
          for (int r = 0; r < kLives; ++r) p.churn(host, bytes, t);
          std::printf("%-6s %8llu %6s %9.1f %9.1f %9.1f %9.1f\n", "churn",
                      static_cast<unsigned long long>(bytes / kMiB), host ? "host" : "gpu",
                      t[0] * 1000 / kLives, t[1] * 1000 / kLives, t[2] * 1000 / kLives,
                      t[3] * 1000 / kLives);
        }
      }
      continue;
    }
    if (mode == "alloc") {
      // Ranges made and released as engine vmm does, 20 times each: us per call of each phase.
      std::printf("%-6s %8s %6s %9s %9s %9s %9s %9s %8s\n", "alloc", "MiB", "side", "reserve",
                  "map", "access", "unmap", "free", "us/MiB");
      for (const bool host : {false, true}) {
        const auto small = p.small_handles(host, 4);
        struct Case {
          uint64_t pieces, piece;
          const std::vector<CUmemGenericAllocationHandle>* h;
        };
        std::vector<Case> cases = {{1, 2 * kMiB, &small}, {4, 2 * kMiB, &small}};
        for (uint64_t n = 1; n <= p.pieces(); n *= 4) cases.push_back({n, c.piece, nullptr});
        for (const Case& k : cases) {
          double t[5] = {0, 0, 0, 0, 0};
          constexpr int kLives = 20;
          for (int r = 0; r < kLives; ++r) p.life(host, k.pieces, k.piece, k.h, t);
          const double mib_k = static_cast<double>(k.pieces * k.piece) / kMiB;
          const double all = t[0] + t[1] + t[2] + t[3] + t[4];
          std::printf("%-6s %8.0f %6s %9.1f %9.1f %9.1f %9.1f %9.1f %8.2f\n", "alloc", mib_k,
                      host ? "host" : "gpu", t[0] * 1000 / kLives, t[1] * 1000 / kLives,
                      t[2] * 1000 / kLives, t[3] * 1000 / kLives, t[4] * 1000 / kLives,
                      all * 1000 / kLives / mib_k);
        }
        for (auto h : small) CU(cuMemRelease(h));
      }
      continue;
    }
    Timing out, in;
    unsigned long long wrong = 0;
    bool refused = false;
    for (int r = 0; r < c.reps && !refused; ++r) {
      refused = !p.move(mode, true, out) || !p.move(mode, false, in);
      wrong += p.wrong();
    }
    if (refused) {
      std::printf("%-10s refused: cuMemUnmap over several mappings\n", mode.c_str());
      return 1;
    }
    for (const auto& [name, t] : {std::pair<const char*, Timing*>{"host", &out}, {"gpu", &in}}) {
      const double total = probe::median(t->total);
      std::printf("%-10s %-8s %9.2f %9.2f %9.2f %8.2f %6llu\n", mode.c_str(), name, total,
                  probe::median(t->wait), probe::median(t->remap), total * 1000 / mib, wrong);
    }
  }
  return 0;
}
