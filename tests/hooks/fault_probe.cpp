// A "CUDA program" for preload_faults_test: linked against the fake libcuda.so.1 (fake_cuda.cpp),
// run with libumswap.so preloaded. It allocates and frees device memory through the driver API,
// prints one line that does not depend on umswap, and exits with the code it is given.
//
// usage: fault_probe EXIT_CODE [fork|lookup-only|profiler-before|profiler-after|program-maps|
//                              ipc-export|ipc-export-own]
//   fork: also fork a child that allocates and exits normally (running the library's exit code),
//         as a DataLoader worker does; the parent waits for it and prints its pid.
//   lookup-only: only look the driver up (dlsym of cuGetProcAddress_v2 in libcuda, as a launcher
//         such as torchrun does when it imports torch), print one line, allocate nothing.
//   program-maps: map memory of its own (cuMemCreate, cuMemMap, cuMemRetainAllocationHandle,
//         cuMemRelease, cuMemUnmap) as NCCL does, allocate nothing else.
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
