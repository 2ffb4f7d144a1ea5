// The ZVC codec on the GPU (issue 40): encode() writes exactly the bytes of the CPU encoder
// (zvc.h) and decode() accepts exactly the buffers the CPU decoder accepts, with the same error
// codes. Built only where nvcc is (umswap_compress_cuda).
//
// Contract, for both functions:
//  - Every pointer is device memory (or memory the device can address) and 16-byte aligned
//    (cudaMalloc gives 256); a misaligned pointer or a size over kMaxInputBytes returns
//    cudaErrorInvalidValue before anything is enqueued.
//  - Work is enqueued on `stream` and nothing waits: results are there when the stream reaches
//    them. No host synchronisation, no allocation (the caller gives scratch), no atomics on the
//    hot path (the decoder uses one only to report an error).
//  - Thread-safe: no state is kept between calls; concurrent calls on different buffers are fine.
//
// How it works (zvc_kernels.cu): one warp per 4 KiB block, 16-byte loads. Encode: a counting pass
// (non-zero words per block -> block sizes), an inclusive scan of the sizes (CUB) into the
// output's offsets table, a one-thread pass for the header and the raw tail, then the writing pass
// (masks by warp shuffles, each word's place from ballots of the lanes' counts). Decode: one pass;
// each warp checks the header, its own offsets and its mask's population count before it reads a
// packed word.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "umswap/compress/zvc_format.h"

namespace umswap::compress::zvc::gpu {

// Device scratch encode() needs for `input_bytes` bytes of words of size `w` (the block sizes and
// CUB's scan storage): about 2 bytes per KiB of input.
uint64_t encode_scratch_bytes(uint64_t input_bytes, Word w);

// Encodes `input` (`input_bytes` bytes) into `out`, which must hold max_compressed_size(
// input_bytes, w) bytes. Writes the encoding's size (what the CPU encoder returns) to
// `*size_out` (device-addressable; may be null). `scratch` holds encode_scratch_bytes() bytes.
// Returns the launch's error; cudaErrorInvalidValue for a bad argument (nothing enqueued).
cudaError_t encode(const void* input, uint64_t input_bytes, Word w, void* out, uint64_t* size_out,
                   void* scratch, uint64_t scratch_bytes, cudaStream_t stream);

// Decodes the `compressed_bytes` bytes at `compressed` into `out` (`out_bytes`, the input's size),
// expecting words of size `w`. `*status` (device-addressable uint32_t) is set to 0 (Error::ok)
// first, then to the Error value of a problem if the buffer has one (when it has several, any one
// of them). On error `out` holds unspecified bytes, but nothing outside `compressed` is read and
// nothing outside `out` is written, whatever the buffer holds.
cudaError_t decode(const void* compressed, uint64_t compressed_bytes, Word w, void* out,
                   uint64_t out_bytes, uint32_t* status, cudaStream_t stream);

}  // namespace umswap::compress::zvc::gpu
