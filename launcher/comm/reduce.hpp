// Element-wise reductions, vectorised (AVX2 picked at run time, portable fallback), in
// one pass over memory: the large-buffer paths are bound by memory bandwidth.
// fp16 and bf16 are widened to fp32, combined, and rounded once per call.
// Every function combines its inputs in the order given: the caller fixes that order,
// which is what makes results bitwise reproducible.
#pragma once

#include <cstddef>

#include "saker/comm.hpp"

namespace saker::comm::reduce {

// acc[i] = acc[i] op in[i]   (avg reduces like sum; see scale_for_avg; prod of integers wraps)
void accumulate(void* acc, const void* in, std::size_t count, DataType type, ReduceOp op);
// out[i] = ins[0][i] op ins[1][i] op ... op ins[n-1][i], left to right; 16-bit types
// accumulate across all n inputs in fp32. out may alias ins[0]. When also is given, the
// result is written there too in the same pass (the shared-memory path publishes its
// reduced part while storing it, saving one trip through memory).
void combine(void* out, const void* const* ins, int n, std::size_t count, DataType type, ReduceOp op,
             void* also = nullptr);
// data[i] = the identity of op: 0 for sum and avg, 1 for prod, the type's largest value for min
// (+inf for floating types), its lowest for max (-inf). What a rank that has joined
// contributes to its peers' reductions.
void fill_identity(void* data, std::size_t count, DataType type, ReduceOp op);
// data[i] /= n (integer division for integer types).
void scale_for_avg(void* data, std::size_t count, DataType type, int n);

float half_to_float(unsigned short h);
unsigned short float_to_half(float f);
float bf16_to_float(unsigned short b);
unsigned short float_to_bf16(float f);

}  // namespace saker::comm::reduce
