#include "umswap/advisor/copy_kernel.h"

#include <cstring>
#include <string>
#include <vector>

namespace umswap::advisor {

// Written by hand (read it with the PTX ISA manual), from the pieces below;
// tests/advisor/copy_kernel_test.cpp has ptxas check it where the toolkit has ptxas, and the GPU
// tests run it (UMSWAP_EVICT_COPY=1; tests/gpu/copy_hash_test.cpp for the page hash).
// Four 16-byte loads in flight per thread: a copy over the PCIe link needs many reads
// outstanding. ld.global.nc: the source does not change while the kernel runs (the stream
// orders it after the source's last writer).
namespace {

constexpr char kRegisters[] = R"(  .reg .pred %more;
  .reg .b32 %bid, %bdim, %tidx, %gdim;
  .reg .b32 %a<4>, %b<4>, %c<4>, %d<4>;
  .reg .b64 %dst, %src, %end, %at, %step, %step4, %ahead, %last, %s, %t;
  ld.param.u64 %dst, [dst_param];
  ld.param.u64 %src, [src_param];
  ld.param.u64 %end, [units_param];
)";

// The grid-stride set-up: %at this thread's first byte, %step the bytes per pass of the grid,
// %ahead three passes (the fourth unit of a round).
std::string grid() {
  return R"(  cvta.to.global.u64 %dst, %dst;
  cvta.to.global.u64 %src, %src;
  shl.b64 %end, %end, 4;                  // bytes
  mov.u32 %bid, %ctaid.x;
  mov.u32 %bdim, %ntid.x;
  mov.u32 %tidx, %tid.x;
  mov.u32 %gdim, %nctaid.x;
  mul.wide.u32 %at, %bid, %bdim;
  cvt.u64.u32 %t, %tidx;
  add.u64 %at, %at, %t;                   // this thread's index in the grid
  shl.b64 %at, %at, 4;                    // its first byte
  mul.wide.u32 %step, %gdim, %bdim;
  shl.b64 %step, %step, 4;
  shl.b64 %step4, %step, 2;
  mul.lo.u64 %ahead, %step, 3;
)";
}

// The units at %at, %at + %step, ... (count of them) of src loaded into a, b, c, d (to_dst
// false), or stored from them at the same offsets of dst.
std::string units(int count, bool to_dst) {
  const std::string at = to_dst ? "%t" : "%s";
  std::string out = "  add.u64 " + at + (to_dst ? ", %dst, %at;\n" : ", %src, %at;\n");
  for (int i = 0; i < count; ++i) {
    const std::string r(1, static_cast<char>('a' + i));
    const std::string regs = "{%" + r + "0, %" + r + "1, %" + r + "2, %" + r + "3}";
    if (i > 0) out += "  add.u64 " + at + ", " + at + ", %step;\n";
    out += to_dst ? "  st.global.v4.u32 [" + at + "], " + regs + ";\n"
                  : "  ld.global.nc.v4.u32 " + regs + ", [" + at + "];\n";
  }
  return out;
}
std::string load(int count) {
  return units(count, false);
}
std::string store(int count) {
  return units(count, true);
}

// Folds a, b, c, d into %h, in order, two 8-byte words each (copy_thread_hash()).
std::string hash(int count) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    const std::string r(1, static_cast<char>('a' + i));
    for (const char* half : {"0, %", "2, %"}) {
      const std::string lo = r + half + r + (half[0] == '0' ? "1" : "3");
      out += "  mov.b64 %x, {%" + lo + "};\n";
      out += "  xor.b64 %h, %h, %x;\n  mul.lo.u64 %h, %h, %prime;\n";
    }
  }
  return out;
}

// The grid-stride loop: rounds of four units while the fourth exists, then one at a time, each
// unit loaded, then stored; on to DONE.
std::string loop() {
  std::string out = "FOUR:\n";
  out += "  add.u64 %last, %at, %ahead;\n  setp.ge.u64 %more, %last, %end;\n";
  out += "  @%more bra ONE;\n" + load(4) + store(4);
  out += "  add.u64 %at, %at, %step4;\n  bra.uni FOUR;\n\nONE:\n";
  out += "  setp.ge.u64 %more, %at, %end;\n  @%more bra DONE;\n" + load(1) + store(1);
  out += "  add.u64 %at, %at, %step;\n  bra.uni ONE;\n\n";
  return out;
}

// Folds the 32 words of shared memory at %s into %h (FNV-1a from its offset basis); `label`
// names the loop.
std::string fold32(const std::string& label) {
  return "  mov.u64 %h, 0xcbf29ce484222325;\n  mov.u32 %i, 0;\n" + label + ":\n" +
         "  ld.shared.u64 %x, [%s];\n  xor.b64 %h, %h, %x;\n  mul.lo.u64 %h, %h, %prime;\n" +
         "  add.u64 %s, %s, 8;\n  add.u32 %i, %i, 1;\n  setp.lt.u32 %more, %i, 32;\n" +
         "  @%more bra " + label + ";\n";
}

std::string build_ptx() {
  std::string ptx = ".version 7.0\n.target sm_75\n.address_size 64\n\n";
  // umswap_copy16(dst, src, units): copies `units` 16-byte units from src to dst.
  ptx += R"(.visible .entry umswap_copy16(.param .u64 dst_param, .param .u64 src_param,
                              .param .u64 units_param)
{
)";
  ptx += kRegisters + grid() + loop() + "DONE:\n  ret;\n}\n\n";

  // umswap_hash_pages(src, hashes): block b hashes the 2 MiB page at src + b * 2 MiB into
  // hashes[b] (page_hash()): its 1024 threads fold their units, four loads in flight each, then
  // 32 of them fold 32 thread hashes each through shared memory, then thread 0 folds those 32.
  ptx += R"(.visible .entry umswap_hash_pages(.param .u64 src_param, .param .u64 hashes_param)
{
  .shared .align 8 .b64 threads_h[1024];
  .shared .align 8 .b64 warps_h[32];
  .reg .pred %more;
  .reg .b32 %bid, %tidx, %i;
  .reg .b32 %a<4>, %b<4>, %c<4>, %d<4>;
  .reg .b64 %src, %hashes, %at, %end, %step, %h, %x, %prime, %t, %s, %sh;
  ld.param.u64 %src, [src_param];
  ld.param.u64 %hashes, [hashes_param];
  cvta.to.global.u64 %src, %src;
  cvta.to.global.u64 %hashes, %hashes;
  mov.u32 %bid, %ctaid.x;
  mov.u32 %tidx, %tid.x;
  cvt.u64.u32 %t, %bid;
  shl.b64 %at, %t, 21;
  add.u64 %at, %src, %at;                 // the page
  add.u64 %end, %at, 2097152;
  cvt.u64.u32 %t, %tidx;
  shl.b64 %x, %t, 4;
  add.u64 %at, %at, %x;                   // this thread's first unit
  mov.u64 %step, 16384;                   // 1024 units
  mov.u64 %h, 0xcbf29ce484222325;
  mov.u64 %prime, 0x100000001b3;

PFOUR:                                    // units at, +1024, +2048, +3072 (128 per thread)
  setp.ge.u64 %more, %at, %end;
  @%more bra PFOLD;
  mov.u64 %s, %at;
  ld.global.nc.v4.u32 {%a0, %a1, %a2, %a3}, [%s];
  add.u64 %s, %s, %step;
  ld.global.nc.v4.u32 {%b0, %b1, %b2, %b3}, [%s];
  add.u64 %s, %s, %step;
  ld.global.nc.v4.u32 {%c0, %c1, %c2, %c3}, [%s];
  add.u64 %s, %s, %step;
  ld.global.nc.v4.u32 {%d0, %d1, %d2, %d3}, [%s];
)";
  ptx += hash(4);
  ptx += R"(  add.u64 %at, %at, 65536;
  bra.uni PFOUR;

PFOLD:
  mov.u64 %sh, threads_h;
  shl.b64 %x, %t, 3;
  add.u64 %s, %sh, %x;
  st.shared.u64 [%s], %h;
  bar.sync 0;
  setp.ge.u32 %more, %tidx, 32;
  @%more bra PWARPS;
  shl.b64 %x, %t, 8;                      // thread w folds thread hashes 32w .. 32w + 31
  add.u64 %s, %sh, %x;
)";
  ptx += fold32("PW");
  ptx += R"(  mov.u64 %sh, warps_h;
  shl.b64 %x, %t, 3;
  add.u64 %s, %sh, %x;
  st.shared.u64 [%s], %h;
PWARPS:
  bar.sync 0;
  setp.ne.u32 %more, %tidx, 0;
  @%more bra PDONE;
  mov.u64 %s, warps_h;
)";
  ptx += fold32("PL");
  ptx += R"(  cvt.u64.u32 %t, %bid;
  shl.b64 %t, %t, 3;
  add.u64 %s, %hashes, %t;
  st.global.u64 [%s], %h;
PDONE:
  ret;
}

)";

  return ptx;
}

}  // namespace

uint64_t copy_thread_hash(const void* src, uint64_t units, uint64_t thread, uint64_t threads) {
  constexpr uint64_t kBasis = 0xcbf29ce484222325ull, kPrime = 0x100000001b3ull;
  uint64_t h = kBasis;
  const auto* bytes = static_cast<const unsigned char*>(src);
  for (uint64_t u = thread; u < units; u += threads) {
    for (int half = 0; half < 2; ++half) {
      uint64_t word = 0;
      std::memcpy(&word, bytes + u * 16 + static_cast<uint64_t>(half) * 8, 8);
      h = (h ^ word) * kPrime;
    }
  }
  return h;
}

uint64_t page_hash(const void* page) {
  constexpr uint64_t kBasis = 0xcbf29ce484222325ull, kPrime = 0x100000001b3ull;
  const auto fold = [](uint64_t h, uint64_t word) { return (h ^ word) * kPrime; };
  std::vector<uint64_t> threads(kPageHashThreads);
  for (uint64_t t = 0; t < kPageHashThreads; ++t) {
    threads[t] = copy_thread_hash(page, kPageBytes / 16, t, kPageHashThreads);
  }
  uint64_t h = kBasis;
  for (uint64_t w = 0; w < 32; ++w) {
    uint64_t hw = kBasis;
    for (uint64_t i = 0; i < 32; ++i) hw = fold(hw, threads[w * 32 + i]);
    h = fold(h, hw);
  }
  return h;
}

std::string_view copy_kernel_ptx() {
  static const std::string ptx = build_ptx();  // NUL-terminated (c_str())
  return ptx;
}

}  // namespace umswap::advisor
