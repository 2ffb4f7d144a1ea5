# CPU unit tests of core/, allocator/ and vmm/ and their helper programs (the registry
# micro-benchmark is in bench/).
# Included from tests/CMakeLists.txt; no GPU needed for any of it.

set(_umswap_unit_dir ${CMAKE_CURRENT_LIST_DIR})

# --- core --------------------------------------------------------------------------------------
umswap_add_test(NAME core_options_test
  SOURCES ${_umswap_unit_dir}/core/options_test.cpp LIBS umswap_core)
umswap_add_test(NAME core_stats_file_test
  SOURCES ${_umswap_unit_dir}/core/stats_file_test.cpp LIBS umswap_core)
umswap_add_test(NAME core_thread_stacks_test
  SOURCES ${_umswap_unit_dir}/core/thread_stacks_test.cpp LIBS umswap_core)
umswap_add_test(NAME core_log_test
  SOURCES ${_umswap_unit_dir}/core/log_test.cpp LIBS umswap_core)
umswap_add_test(NAME core_flight_recorder_test
  SOURCES ${_umswap_unit_dir}/core/flight_recorder_test.cpp LIBS umswap_core)

# --- allocator ---------------------------------------------------------------------------------
umswap_add_test(NAME allocator_registry_test
  SOURCES ${_umswap_unit_dir}/allocator/registry_test.cpp LIBS umswap_allocator)
umswap_add_test(NAME allocator_slab_allocator_test
  SOURCES ${_umswap_unit_dir}/allocator/slab_allocator_test.cpp LIBS umswap_allocator)
umswap_add_test(NAME allocator_drop_order_test
  SOURCES ${_umswap_unit_dir}/allocator/drop_order_test.cpp LIBS umswap_allocator)
umswap_add_test(NAME allocator_placement_test
  SOURCES ${_umswap_unit_dir}/allocator/placement_test.cpp LIBS umswap_allocator)
umswap_add_test(NAME allocator_managed_allocator_test
  SOURCES ${_umswap_unit_dir}/allocator/managed_allocator_test.cpp LIBS umswap_allocator)
# Engine vmm's allocator over the vmm tests' fake driver (tests/vmm/fake_vmm_driver.h).
umswap_add_test(NAME allocator_vmm_allocator_test
  SOURCES ${_umswap_unit_dir}/allocator/vmm_allocator_test.cpp LIBS umswap_allocator)
# Engine vmm's moves (which range a step brings in, which goes out) and its hold on the program.
umswap_add_test(NAME allocator_vmm_residency_test
  SOURCES ${_umswap_unit_dir}/allocator/vmm_residency_test.cpp LIBS umswap_allocator)
# Engine vmm's small allocations: slabs shared by allocations of at most 1 MiB.
umswap_add_test(NAME allocator_vmm_small_test
  SOURCES ${_umswap_unit_dir}/allocator/vmm_small_test.cpp LIBS umswap_allocator)
# Engine vmm's windows one by one, summed per iteration for the stats file.
umswap_add_test(NAME allocator_vmm_window_log_test
  SOURCES ${_umswap_unit_dir}/allocator/vmm_window_log_test.cpp LIBS umswap_allocator)
# Engine vmm's plan: iterations recorded, ranges named across them, the table of windows.
umswap_add_test(NAME allocator_vmm_plan_test
  SOURCES ${_umswap_unit_dir}/allocator/vmm_plan_test.cpp LIBS umswap_allocator)
umswap_add_test(NAME allocator_submission_hold_test
  SOURCES ${_umswap_unit_dir}/allocator/submission_hold_test.cpp LIBS umswap_allocator)
# The GPU memory a program maps itself, counted against the budget.
umswap_add_test(NAME allocator_program_mappings_test
  SOURCES ${_umswap_unit_dir}/allocator/program_mappings_test.cpp LIBS umswap_allocator)
umswap_add_test(NAME allocator_virtual_handles_test
  SOURCES ${_umswap_unit_dir}/allocator/virtual_handles_test.cpp LIBS umswap_allocator)

# A program the call-site test runs twice, to compare identities across processes. Built as a
# PIE so that each run loads it at a different address (where ASLR is on).
add_executable(call_site_probe ${_umswap_unit_dir}/allocator/call_site_probe.cpp)
target_link_libraries(call_site_probe PRIVATE umswap_allocator)
set_target_properties(call_site_probe PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_options(call_site_probe PRIVATE -fPIE)
target_link_options(call_site_probe PRIVATE -pie)
umswap_warnings(call_site_probe)

# The same tiny relay library under two names: one that call_site.cpp must skip as a CUDA
# library, one it must keep.
add_library(umswap_test_relay_cuda SHARED ${_umswap_unit_dir}/allocator/frame_relay.cpp)
set_target_properties(umswap_test_relay_cuda PROPERTIES OUTPUT_NAME cudart.umswap_test)
target_compile_definitions(umswap_test_relay_cuda PRIVATE UMSWAP_RELAY_NAME=umswap_test_relay_cuda)
umswap_warnings(umswap_test_relay_cuda)
add_library(umswap_test_relay_plain SHARED ${_umswap_unit_dir}/allocator/frame_relay.cpp)
set_target_properties(umswap_test_relay_plain PROPERTIES OUTPUT_NAME umswap_test_relay)
target_compile_definitions(umswap_test_relay_plain PRIVATE
  UMSWAP_RELAY_NAME=umswap_test_relay_plain)
umswap_warnings(umswap_test_relay_plain)

umswap_add_test(NAME allocator_call_site_test
  SOURCES ${_umswap_unit_dir}/allocator/call_site_test.cpp
  LIBS umswap_allocator umswap_test_relay_cuda umswap_test_relay_plain)
add_dependencies(allocator_call_site_test call_site_probe)
target_compile_definitions(allocator_call_site_test PRIVATE
  UMSWAP_TEST_CALL_SITE_PROBE="$<TARGET_FILE:call_site_probe>"
  UMSWAP_TEST_RELAY_CUDA_NAME="$<TARGET_FILE_NAME:umswap_test_relay_cuda>"
  UMSWAP_TEST_RELAY_PLAIN_NAME="$<TARGET_FILE_NAME:umswap_test_relay_plain>")

# --- vmm ---------------------------------------------------------------------------------------
umswap_add_test(NAME vmm_chunk_arena_test
  SOURCES ${_umswap_unit_dir}/vmm/chunk_arena_test.cpp LIBS umswap_vmm)
# The pool's blocks and single chunks under random takes, gives, limits and trims.
umswap_add_test(NAME vmm_chunk_pool_test
  SOURCES ${_umswap_unit_dir}/vmm/chunk_pool_test.cpp LIBS umswap_vmm)

# PyTorch's caching allocator's blocks (torch_blocks.h) against a fake libc10_cuda.so with the
# real symbol names, built alone in its own directory under that file name.
add_library(umswap_test_fake_c10_cuda SHARED ${_umswap_unit_dir}/allocator/fake_c10/fake_c10_cuda.cpp)
set_target_properties(umswap_test_fake_c10_cuda PROPERTIES
  OUTPUT_NAME c10_cuda PREFIX lib SUFFIX .so CXX_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake_c10)
umswap_warnings(umswap_test_fake_c10_cuda)
umswap_add_test(NAME allocator_torch_blocks_test
  SOURCES ${_umswap_unit_dir}/allocator/torch_blocks_test.cpp LIBS umswap_allocator)
add_dependencies(allocator_torch_blocks_test umswap_test_fake_c10_cuda)
target_compile_definitions(allocator_torch_blocks_test PRIVATE
  UMSWAP_TEST_FAKE_C10_CUDA="$<TARGET_FILE:umswap_test_fake_c10_cuda>")
