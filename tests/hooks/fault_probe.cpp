// A "CUDA program" for preload_faults_test: linked against the fake libcuda.so.1 (fake_cuda.cpp),
// run with libumswap.so preloaded. It allocates and frees device memory through the driver API,
// prints one line that does not depend on umswap, and exits with the code it is given.
//
// usage: fault_probe EXIT_CODE [fork]
//   fork: also fork a child that allocates and exits normally (running the library's exit code),
//         as a DataLoader worker does; the parent waits for it and prints its pid.
// With UMSWAP_TEST_DLOPEN=LIB in the environment, LIB is dlopen'ed at start and its
// cuMemAlloc_v2/cuMemFree_v2 called instead of preloading it (for AddressSanitizer builds:
// preload_faults_test.cpp says why).
#include <cuda.h>
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fault_probe EXIT_CODE [fork]\n");
    return 2;
  }
  const int exit_code = std::atoi(argv[1]);
  const bool fork_child = argc > 2 && std::strcmp(argv[2], "fork") == 0;
  if (!load_library()) return 3;
  const int allocated = allocate_and_free(3);
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
