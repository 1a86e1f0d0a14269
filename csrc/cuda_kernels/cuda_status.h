// The CUDA handlers' runtime-error reporting: one message form for every custom call of libmxprec_cuda.so.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "ffi_helpers.h"

namespace mxprec {

// Success, or an Internal error naming the op, the step (`what`) and the CUDA runtime's error.
inline ffi::Error cuda_status(const char* op, const char* what, cudaError_t e) {
  if (e == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(op) + ": " + what + ": " + cudaGetErrorString(e));
}

}  // namespace mxprec
