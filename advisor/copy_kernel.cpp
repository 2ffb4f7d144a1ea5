#include "umswap/advisor/copy_kernel.h"

namespace umswap::advisor {

// Written by hand (read it with the PTX ISA manual); tests/advisor/copy_kernel_test.cpp has ptxas
// check it where the toolkit has ptxas, and the GPU tests run it (UMSWAP_EVICT_COPY_PATH=kernel).
// Four 16-byte loads in flight per thread: a copy over the PCIe link needs many reads
// outstanding. ld.global.nc: the source does not change while the kernel runs (the stream orders
// it after the source's last writer).
namespace {
constexpr char kPtx[] = R"PTX(.version 7.0
.target sm_75
.address_size 64

// umswap_copy16(dst, src, units): copies `units` 16-byte units from src to dst. Grid-stride;
// each thread keeps four loads in flight, which a copy across the PCIe link needs.
.visible .entry umswap_copy16(.param .u64 dst_param, .param .u64 src_param,
                              .param .u64 units_param)
{
  .reg .pred %more;
  .reg .b32 %bid, %bdim, %tidx, %gdim;
  .reg .b32 %a<4>, %b<4>, %c<4>, %d<4>;
  .reg .b64 %dst, %src, %end, %at, %step, %step4, %ahead, %last, %s, %t;

  ld.param.u64 %dst, [dst_param];
  ld.param.u64 %src, [src_param];
  ld.param.u64 %end, [units_param];
  cvta.to.global.u64 %dst, %dst;
  cvta.to.global.u64 %src, %src;
  shl.b64 %end, %end, 4;                  // bytes to copy
  mov.u32 %bid, %ctaid.x;
  mov.u32 %bdim, %ntid.x;
  mov.u32 %tidx, %tid.x;
  mov.u32 %gdim, %nctaid.x;
  mul.wide.u32 %at, %bid, %bdim;
  cvt.u64.u32 %t, %tidx;
  add.u64 %at, %at, %t;
  shl.b64 %at, %at, 4;                    // this thread's first byte
  mul.wide.u32 %step, %gdim, %bdim;
  shl.b64 %step, %step, 4;                // bytes per pass of the grid
  shl.b64 %step4, %step, 2;
  mul.lo.u64 %ahead, %step, 3;

FOUR:                                     // while the fourth unit of this round exists
  add.u64 %last, %at, %ahead;
  setp.ge.u64 %more, %last, %end;
  @%more bra ONE;
  add.u64 %s, %src, %at;
  ld.global.nc.v4.u32 {%a0, %a1, %a2, %a3}, [%s];
  add.u64 %s, %s, %step;
  ld.global.nc.v4.u32 {%b0, %b1, %b2, %b3}, [%s];
  add.u64 %s, %s, %step;
  ld.global.nc.v4.u32 {%c0, %c1, %c2, %c3}, [%s];
  add.u64 %s, %s, %step;
  ld.global.nc.v4.u32 {%d0, %d1, %d2, %d3}, [%s];
  add.u64 %t, %dst, %at;
  st.global.v4.u32 [%t], {%a0, %a1, %a2, %a3};
  add.u64 %t, %t, %step;
  st.global.v4.u32 [%t], {%b0, %b1, %b2, %b3};
  add.u64 %t, %t, %step;
  st.global.v4.u32 [%t], {%c0, %c1, %c2, %c3};
  add.u64 %t, %t, %step;
  st.global.v4.u32 [%t], {%d0, %d1, %d2, %d3};
  add.u64 %at, %at, %step4;
  bra.uni FOUR;

ONE:                                      // the rest, one unit at a time
  setp.ge.u64 %more, %at, %end;
  @%more bra DONE;
  add.u64 %s, %src, %at;
  ld.global.nc.v4.u32 {%a0, %a1, %a2, %a3}, [%s];
  add.u64 %t, %dst, %at;
  st.global.v4.u32 [%t], {%a0, %a1, %a2, %a3};
  add.u64 %at, %at, %step;
  bra.uni ONE;

DONE:
  ret;
}
)PTX";
}  // namespace

std::string_view copy_kernel_ptx() {
  return {kPtx, sizeof kPtx - 1};
}

}  // namespace umswap::advisor
