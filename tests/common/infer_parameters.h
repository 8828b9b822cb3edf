#pragma once
// Open Inference Protocol request parameters of each type, for tests that build v2 requests from
// the v2 proto alone (the codec's unit tests and the end-to-end v2 client).

#include <cstdint>
#include <string>

#include "inference/grpc_predict_v2.pb.h"

namespace odeserve::testing {

inline inference::InferParameter Int(int64_t v) {
  inference::InferParameter p;
  p.set_int64_param(v);
  return p;
}
inline inference::InferParameter Str(const std::string& v) {
  inference::InferParameter p;
  p.set_string_param(v);
  return p;
}
inline inference::InferParameter Bool(bool v) {
  inference::InferParameter p;
  p.set_bool_param(v);
  return p;
}
inline inference::InferParameter Double(double v) {
  inference::InferParameter p;
  p.set_double_param(v);
  return p;
}

}  // namespace odeserve::testing
