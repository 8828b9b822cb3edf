#pragma once
// Abseil 20220623 (Debian bookworm) predates ABSL_RETURN_IF_ERROR; these are our two macros.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ODESERVE_CONCAT_INNER(a, b) a##b
#define ODESERVE_CONCAT(a, b) ODESERVE_CONCAT_INNER(a, b)

/// Returns from the current function with the status of `expr` if it is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    const ::absl::Status _odeserve_status = (expr);    \
    if (!_odeserve_status.ok()) return _odeserve_status; \
  } while (0)

/// `ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK StatusOr or returns its status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(ODESERVE_CONCAT(_odeserve_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                          \
  if (!statusor.ok()) return statusor.status();    \
  lhs = std::move(statusor).value()
