#pragma once
// Abseil 20220623 (Debian bookworm) has no ABSL_RETURN_IF_ERROR. The client keeps its own two
// macros under a client-specific prefix so that it never collides with the server's.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define OC_CONCAT_INNER(a, b) a##b
#define OC_CONCAT(a, b) OC_CONCAT_INNER(a, b)

/// Returns the status of `expr` from the current function when it is not OK.
#define OC_RETURN_IF_ERROR(expr)                    \
  do {                                              \
    const ::absl::Status _oc_status = (expr);       \
    if (!_oc_status.ok()) return _oc_status;        \
  } while (0)

/// `OC_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK StatusOr or returns its status.
#define OC_ASSIGN_OR_RETURN(lhs, expr) \
  OC_ASSIGN_OR_RETURN_IMPL(OC_CONCAT(_oc_statusor_, __LINE__), lhs, expr)

#define OC_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                             \
  if (!statusor.ok()) return statusor.status();       \
  lhs = std::move(statusor).value()
