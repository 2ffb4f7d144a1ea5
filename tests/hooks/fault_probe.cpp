// A "CUDA program" for preload_faults_test: linked against the fake libcuda.so.1 (fake_cuda.cpp),
// run with libumswap.so preloaded. It allocates and frees device memory through the driver API,
// prints one line that does not depend on umswap, and exits with the code it is given.
//
// usage: fault_probe EXIT_CODE [fork|lookup-only|profiler-before|profiler-after|program-maps|
//                              ipc-export|ipc-export-own|vmm-handles]
//   fork: also fork a child that allocates and exits normally (running the library's exit code),
//         as a DataLoader worker does; the parent waits for it and prints its pid.
//   lookup-only: only look the driver up (dlsym of cuGetProcAddress_v2 in libcuda, as a launcher
//         such as torchrun does when it imports torch), print one line, allocate nothing.
//   program-maps: map memory of its own (cuMemCreate, cuMemMap, cuMemRetainAllocationHandle,
//         cuMemRelease, cuMemUnmap) as NCCL does, allocate nothing else.
//   vmm-handles: under UMSWAP_ENGINE=vmm, map memory of its own as PyTorch's expandable segments
//         do (cuMemCreate, cuMemAddressReserve, cuMemMap whole, cuMemSetAccess), write and read it,
//         and go through what the engine answers for such handles (retain, properties, export,
//         a second mapping, part of a handle, unmap, release twice, a fabric handle, a handle
//         that lands on host chunks, a mapping of one unmapped and kept, the engine's mapping
//         beside the driver's); print one line per check and a count of those failed.
//   vmm-torch-handle LIB: under UMSWAP_ENGINE=vmm, a 2 MiB device handle made through LIB's
//         c10_shim_create (a library named as PyTorch's libc10_cuda.so) and one made directly;
//         print whether each is virtual.
//   ipc-export: export (cuIpcGetMemHandle) a 1 MiB allocation of the program's own managed
//         memory (cuMemAllocManaged), then one made through cuMemAlloc twice; print the results.
//   ipc-export-own: only the first of those.
//   profiler-before, profiler-after: start a profiler as torch.profiler does (cuptiSubscribe,
//         cuptiActivityRegisterCallbacks, cuptiActivityEnable from the libcupti named by
//         UMSWAP_CUPTI_LIBRARY, loaded globally as libtorch_cuda loads its own) before the first
//         allocation or after it, and print the three results.
// With UMSWAP_TEST_DLOPEN=LIB in the environment, LIB is dlopen'ed at start and its
// cuMemAlloc_v2/cuMemFree_v2 called instead of preloading it (for AddressSanitizer builds:
// preload_faults_test.cpp says why).
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

decltype(&cuMemAlloc_v2) g_alloc = &cuMemAlloc_v2;
decltype(&cuMemFree_v2) g_free = &cuMemFree_v2;
CUdeviceptr g_kept = 0;  // stays allocated until exit, as in any training program

bool load_library() {
  const char* library = std::getenv("UMSWAP_TEST_DLOPEN");
  if (!library || !*library) return true;
  void* handle = dlopen(library, RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    std::fprintf(stderr, "fault_probe: %s\n", dlerror());
    return false;
  }
  g_alloc = reinterpret_cast<decltype(g_alloc)>(dlsym(handle, "cuMemAlloc_v2"));
  g_free = reinterpret_cast<decltype(g_free)>(dlsym(handle, "cuMemFree_v2"));
  return g_alloc && g_free;
}

int allocate_and_free(int count) {
  int ok = 0;
  for (int i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    if (g_alloc(&p, size_t{1} << 20) != CUDA_SUCCESS || p == 0) continue;
    std::memset(reinterpret_cast<void*>(p), i, 16);  // the fake "device" is host memory
    ++ok;
    if (i == 0 && !g_kept) {
      g_kept = p;
    } else {
      g_free(p);
    }
  }
  return ok;
}

// Fills [address, address + bytes) with `value` and reads it back (the fake "device" is host
// memory, mapped for real in reservations).
bool write_and_read(CUdeviceptr address, size_t bytes, unsigned char value) {
  auto* p = reinterpret_cast<unsigned char*>(address);
  std::memset(p, value, bytes);
  for (size_t i = 0; i < bytes; i += 4093) {
    if (p[i] != value) return false;
  }
  return p[bytes - 1] == value;
}

// Whether every byte of [address, address + bytes) still reads `value` (nothing written).
bool holds(CUdeviceptr address, size_t bytes, unsigned char value) {
  const auto* p = reinterpret_cast<const unsigned char*>(address);
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != value) return false;
  }
  return true;
}

// Whether the process's own map shows [address, address + bytes) wholly backed by the fake
// driver's physical memory (its memfds): mapped at those addresses, not merely reserved.
bool backed_by_fake_memory(CUdeviceptr address, size_t bytes) {
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return false;
  char line[512];
  CUdeviceptr at = address;
  while (std::fgets(line, sizeof line, maps)) {
    unsigned long long from = 0, to = 0;
    if (std::sscanf(line, "%llx-%llx", &from, &to) != 2 || to <= at || from > at) continue;
    if (!std::strstr(line, "memfd:fake_cuda")) break;
    at = to;
    if (at >= address + bytes) break;
  }
  std::fclose(maps);
  return at >= address + bytes;
}

int vmm_handles() {
  int failed = 0;
  auto check = [&](const char* what, bool ok) {
    std::printf("check %s: %s\n", what, ok ? "ok" : "FAILED");
    failed += ok ? 0 : 1;
    return ok;
  };
  auto is_virtual = [](CUmemGenericAllocationHandle h) { return (h >> 63) != 0; };
  allocate_and_free(1);  // engine vmm starts with the first allocation
  constexpr size_t kMiB = size_t{1} << 20;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr va = 0;
  if (!check("reserve", cuMemAddressReserve(&va, 64 * kMiB, 0, 0, 0) == CUDA_SUCCESS)) {
    return failed;
  }
  CUmemGenericAllocationHandle h = 0, again = 0;
  check("a virtual handle", cuMemCreate(&h, 8 * kMiB, &prop, 0) == CUDA_SUCCESS && is_virtual(h));
  // Flags are reserved (0): refused, and the handle stays free to map.
  check("a mapping with flags: invalid",
        cuMemMap(va, 8 * kMiB, 0, h, 1) == CUDA_ERROR_INVALID_VALUE);
  check("mapped whole", cuMemMap(va, 8 * kMiB, 0, h, 0) == CUDA_SUCCESS);
  check("access", cuMemSetAccess(va, 8 * kMiB, &access, 1) == CUDA_SUCCESS);
  check("written and read", write_and_read(va, 8 * kMiB, 0x5a));
  check("at the program's addresses, on the engine's memory", backed_by_fake_memory(va, 8 * kMiB));
  check("retained from inside",
        cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va + kMiB)) == CUDA_SUCCESS &&
            again == h);
  check("the retained one released", cuMemRelease(again) == CUDA_SUCCESS);
  CUmemAllocationProp got{};
  check("properties", cuMemGetAllocationPropertiesFromHandle(&got, h) == CUDA_SUCCESS &&
                          got.type == CU_MEM_ALLOCATION_TYPE_PINNED &&
                          got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == 0);
  int fd = -1;
  check("export of a mapped handle refused",
        cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
            CUDA_ERROR_NOT_SUPPORTED);
  check("an unmap of part refused",
        cuMemUnmap(va + 2 * kMiB, 2 * kMiB) == CUDA_ERROR_NOT_SUPPORTED);
  check("access over part refused",
        cuMemSetAccess(va, 4 * kMiB, &access, 1) == CUDA_ERROR_NOT_SUPPORTED);
  CUmemAccessDesc other = access;
  other.location.id = 1;
  check("access for another device refused",
        cuMemSetAccess(va, 8 * kMiB, &other, 1) == CUDA_ERROR_NOT_SUPPORTED);
  check("the bytes still there", holds(va, 8 * kMiB, 0x5a));
  check("a second mapping refused",
        cuMemMap(va + 8 * kMiB, 8 * kMiB, 0, h, 0) == CUDA_ERROR_NOT_SUPPORTED);
  // Part of a handle: real memory, the driver's from then on.
  CUmemGenericAllocationHandle part = 0, real = 0;
  check("a second virtual handle",
        cuMemCreate(&part, 4 * kMiB, &prop, 0) == CUDA_SUCCESS && is_virtual(part));
  check("mapped in part", cuMemMap(va + 16 * kMiB, 2 * kMiB, 0, part, 0) == CUDA_SUCCESS);
  check("its access", cuMemSetAccess(va + 16 * kMiB, 2 * kMiB, &access, 1) == CUDA_SUCCESS);
  check("its memory written and read", write_and_read(va + 16 * kMiB, 2 * kMiB, 0x33));
  // (The fake driver counts no references: the real handle is not released a second time.)
  check(
      "retained: the driver's handle",
      cuMemRetainAllocationHandle(&real, reinterpret_cast<void*>(va + 16 * kMiB)) == CUDA_SUCCESS &&
          real != 0 && !is_virtual(real));
  check("the part unmapped", cuMemUnmap(va + 16 * kMiB, 2 * kMiB) == CUDA_SUCCESS);
  check("the second released", cuMemRelease(part) == CUDA_SUCCESS);
  // Exported before it is ever mapped: real memory, exported, then mapped by the driver.
  CUmemGenericAllocationHandle shared = 0;
  fd = -1;
  check("exported before mapped",
        cuMemCreate(&shared, 2 * kMiB, &prop, 0) == CUDA_SUCCESS && is_virtual(shared) &&
            cuMemExportToShareableHandle(&fd, shared, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                         0) == CUDA_SUCCESS &&
            fd >= 0);
  if (fd >= 0) ::close(fd);
  check("then mapped and written",
        cuMemMap(va + 20 * kMiB, 2 * kMiB, 0, shared, 0) == CUDA_SUCCESS &&
            cuMemSetAccess(va + 20 * kMiB, 2 * kMiB, &access, 1) == CUDA_SUCCESS &&
            write_and_read(va + 20 * kMiB, 2 * kMiB, 0x44));
  check("and let go", cuMemUnmap(va + 20 * kMiB, 2 * kMiB) == CUDA_SUCCESS &&
                          cuMemRelease(shared) == CUDA_SUCCESS);
  // Three more of 8 MiB under a 16 MiB pool: the later ones on host chunks, as readable.
  CUmemGenericAllocationHandle more[3] = {};
  bool mapped = true, kept = true;
  for (int i = 0; i < 3; ++i) {
    const CUdeviceptr at = va + static_cast<CUdeviceptr>(24 + 8 * i) * kMiB;
    mapped = mapped && cuMemCreate(&more[i], 8 * kMiB, &prop, 0) == CUDA_SUCCESS &&
             is_virtual(more[i]) && cuMemMap(at, 8 * kMiB, 0, more[i], 0) == CUDA_SUCCESS &&
             cuMemSetAccess(at, 8 * kMiB, &access, 1) == CUDA_SUCCESS &&
             write_and_read(at, 8 * kMiB, static_cast<unsigned char>(0x70 + i));
  }
  check("three more mapped and written", mapped);
  check("the first still holds its bytes", holds(va, 8 * kMiB, 0x5a));
  for (int i = 0; i < 3; ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(va + (24 + 8 * i) * kMiB);
    kept = kept && p[0] == 0x70 + i && p[8 * kMiB - 1] == 0x70 + i;
  }
  check("and each of them its own", kept);
  check("all unmapped at once", cuMemUnmap(va + 24 * kMiB, 24 * kMiB) == CUDA_SUCCESS);
  bool released = true;
  for (CUmemGenericAllocationHandle m : more)
    released = released && cuMemRelease(m) == CUDA_SUCCESS;
  check("and released", released);
  // Unmapped by the program but not released: its contents went with the engine's range, so a
  // mapping of it again is refused.
  CUmemGenericAllocationHandle lost = 0;
  check("unmapped, kept, mapped again: refused",
        cuMemCreate(&lost, 2 * kMiB, &prop, 0) == CUDA_SUCCESS && is_virtual(lost) &&
            cuMemMap(va + 48 * kMiB, 2 * kMiB, 0, lost, 0) == CUDA_SUCCESS &&
            cuMemUnmap(va + 48 * kMiB, 2 * kMiB) == CUDA_SUCCESS &&
            cuMemMap(va + 48 * kMiB, 2 * kMiB, 0, lost, 0) == CUDA_ERROR_NOT_SUPPORTED &&
            cuMemRelease(lost) == CUDA_SUCCESS);
  // The engine's mapping beside the driver's (a fabric handle), given access and unmapped in one
  // call each: the driver's part goes to the driver.
  CUmemGenericAllocationHandle ours = 0, theirs = 0;
  CUmemAllocationProp fabric_prop = prop;
  fabric_prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  check("beside the driver's: mapped",
        cuMemCreate(&ours, 2 * kMiB, &prop, 0) == CUDA_SUCCESS && is_virtual(ours) &&
            cuMemCreate(&theirs, 2 * kMiB, &fabric_prop, 0) == CUDA_SUCCESS &&
            !is_virtual(theirs) && cuMemMap(va + 56 * kMiB, 2 * kMiB, 0, ours, 0) == CUDA_SUCCESS &&
            cuMemMap(va + 58 * kMiB, 2 * kMiB, 0, theirs, 0) == CUDA_SUCCESS);
  check("both given access at once",
        cuMemSetAccess(va + 56 * kMiB, 4 * kMiB, &access, 1) == CUDA_SUCCESS &&
            write_and_read(va + 56 * kMiB, 4 * kMiB, 0x21));
  check("both unmapped at once", cuMemUnmap(va + 56 * kMiB, 4 * kMiB) == CUDA_SUCCESS &&
                                     cuMemRelease(ours) == CUDA_SUCCESS &&
                                     cuMemRelease(theirs) == CUDA_SUCCESS);
  check("the first unmapped", cuMemUnmap(va, 8 * kMiB) == CUDA_SUCCESS);
  check("released", cuMemRelease(h) == CUDA_SUCCESS);
  check("released again: invalid", cuMemRelease(h) == CUDA_ERROR_INVALID_VALUE);
  check("a mapping of it now: invalid",
        cuMemMap(va, 8 * kMiB, 0, h, 0) == CUDA_ERROR_INVALID_VALUE);
  // A fabric handle (shared across nodes) stays the driver's.
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  CUmemGenericAllocationHandle fabric = 0;
  check("a fabric handle is the driver's",
        cuMemCreate(&fabric, 2 * kMiB, &prop, 0) == CUDA_SUCCESS && fabric != 0 &&
            !is_virtual(fabric) && cuMemRelease(fabric) == CUDA_SUCCESS);
  check("reservation freed", cuMemAddressFree(va, 64 * kMiB) == CUDA_SUCCESS);
  return failed;
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}
void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = nullptr;
  *size = 0;
  *max_records = 0;
}
void CUPTIAPI on_buffer_completed(CUcontext, uint32_t, uint8_t*, size_t, size_t) {}

// What a profiler does first. The functions are looked up by name in the global scope, where a
// preloaded libumswap.so comes before the libcupti.
bool start_profiler() {
  const char* library = std::getenv("UMSWAP_CUPTI_LIBRARY");
  if (!library || !dlopen(library, RTLD_NOW | RTLD_GLOBAL)) {
    std::fprintf(stderr, "fault_probe: no CUPTI library to load\n");
    return false;
  }
  auto subscribe =
      reinterpret_cast<decltype(&cuptiSubscribe)>(dlsym(RTLD_DEFAULT, "cuptiSubscribe"));
  auto callbacks = reinterpret_cast<decltype(&cuptiActivityRegisterCallbacks)>(
      dlsym(RTLD_DEFAULT, "cuptiActivityRegisterCallbacks"));
  auto enable =
      reinterpret_cast<decltype(&cuptiActivityEnable)>(dlsym(RTLD_DEFAULT, "cuptiActivityEnable"));
  if (!subscribe || !callbacks || !enable) return false;
  CUpti_SubscriberHandle subscriber = nullptr;
  const int s = subscribe(&subscriber, on_callback, nullptr);
  const int c = callbacks(on_buffer_requested, on_buffer_completed);
  const int e = enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  std::printf("profiler: subscribe %d callbacks %d enable %d\n", s, c, e);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(
        stderr, "usage: fault_probe EXIT_CODE [fork|lookup-only|profiler-before|profiler-after]\n");
    return 2;
  }
  const int exit_code = std::atoi(argv[1]);
  const char* what = argc > 2 ? argv[2] : "";
  const bool fork_child = std::strcmp(what, "fork") == 0;
  if (!load_library()) return 3;
  if (std::strcmp(what, "lookup-only") == 0) {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    const bool found = cuda && dlsym(cuda, "cuGetProcAddress_v2");
    std::printf("probe: lookup %s\n", found ? "found" : "failed");
    std::fflush(stdout);
    return exit_code;
  }
  if (std::strcmp(what, "program-maps") == 0) {
    // Memory the program maps itself, as NCCL does: a 4 MiB handle mapped and released at once
    // (alive while mapped), and a 2 MiB one retained again from its address, unmapped and
    // released once (alive: one reference left). Both count at exit: 6 MiB.
    allocate_and_free(1);  // a process that used CUDA through umswap: it writes its stats
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle kept = 0, shared = 0, again = 0;
    const CUdeviceptr at = 0x7000000000, at2 = 0x7100000000;
    const bool ok =
        cuMemCreate(&kept, 4 << 20, &prop, 0) == CUDA_SUCCESS &&
        cuMemMap(at, 4 << 20, 0, kept, 0) == CUDA_SUCCESS && cuMemRelease(kept) == CUDA_SUCCESS &&
        cuMemCreate(&shared, 2 << 20, &prop, 0) == CUDA_SUCCESS &&
        cuMemMap(at2, 2 << 20, 0, shared, 0) == CUDA_SUCCESS &&
        cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(at2)) == CUDA_SUCCESS &&
        again == shared && cuMemUnmap(at2, 2 << 20) == CUDA_SUCCESS &&
        cuMemRelease(shared) == CUDA_SUCCESS;
    std::printf("probe: program maps %s\n", ok ? "ok" : "failed");
    std::fflush(stdout);
    return ok ? exit_code : 5;
  }
  if (std::strcmp(what, "vmm-torch-handle") == 0 && argc > 3) {
    allocate_and_free(1);  // engine vmm starts with the first allocation
    using Create = CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*);
    void* shim = dlopen(argv[3], RTLD_NOW);
    auto create = shim ? reinterpret_cast<Create>(dlsym(shim, "c10_shim_create")) : nullptr;
    if (!create) return 4;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle torch = 0, own = 0;
    const CUresult a = create(&torch, size_t{2} << 20, &prop);
    const CUresult b = cuMemCreate(&own, size_t{2} << 20, &prop, 0);
    std::printf("probe: shim handle %s (%d), own handle %s (%d)\n",
                (torch >> 63) ? "virtual" : "real", a, (own >> 63) ? "virtual" : "real", b);
    cuMemRelease(torch);
    cuMemRelease(own);
    std::fflush(stdout);
    return exit_code;
  }
  if (std::strcmp(what, "vmm-handles") == 0) {
    const int failed = vmm_handles();
    std::printf("probe: vmm handles, %d failed\n", failed);
    std::fflush(stdout);
    return failed == 0 ? exit_code : 5;
  }
  if (std::strcmp(what, "ipc-export") == 0 || std::strcmp(what, "ipc-export-own") == 0) {
    allocate_and_free(1);  // kept: g_kept
    CUdeviceptr own = 0;
    CUipcMemHandle handle{};
    const CUresult managed = cuMemAllocManaged(&own, 1 << 20, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS
                                 ? cuIpcGetMemHandle(&handle, own)
                                 : CUDA_ERROR_OUT_OF_MEMORY;
    if (std::strcmp(what, "ipc-export-own") == 0) {
      std::printf("probe: export own managed %d\n", managed);
    } else {
      const CUresult kept = cuIpcGetMemHandle(&handle, g_kept);
      const CUresult again = cuIpcGetMemHandle(&handle, g_kept);
      std::printf("probe: export own managed %d, allocation %d, again %d\n", managed, kept, again);
    }
    std::fflush(stdout);
    return exit_code;
  }
  if (std::strcmp(what, "profiler-before") == 0 && !start_profiler()) return 4;
  const int allocated = allocate_and_free(3);
  if (std::strcmp(what, "profiler-after") == 0 && !start_profiler()) return 4;
  if (fork_child) {
    std::fflush(stdout);
    const pid_t child = ::fork();
    if (child == 0) {
      allocate_and_free(2);
      std::exit(0);  // exit(), not _exit(): the library's exit handlers run in the child too
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    std::printf("probe: child %d exited %d\n", static_cast<int>(child),
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  std::printf("probe: pid %d, %d allocations\n", static_cast<int>(::getpid()), allocated);
  std::fflush(stdout);  // out before the library's exit handlers run (a test kills them)
  return exit_code;
}
