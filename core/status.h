// Status helpers. Abseil 20220623 (Debian 12) has Status/StatusOr but no RETURN_IF_ERROR /
// ASSIGN_OR_RETURN; these two macros are the project's only spelling of them.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define STRATA_STATUS_CONCAT_INNER(a, b) a##b
#define STRATA_STATUS_CONCAT(a, b) STRATA_STATUS_CONCAT_INNER(a, b)

// RETURN_IF_ERROR(expr): evaluates an absl::Status expression once; returns it if not ok.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status strata_status_ = (expr);          \
    if (!strata_status_.ok()) return strata_status_; \
  } while (false)

// ASSIGN_OR_RETURN(lhs, expr): evaluates an absl::StatusOr<T> expression; on error returns its
// status, else moves the value into `lhs` (which may be a declaration: `auto x`).
#define ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL(STRATA_STATUS_CONCAT(strata_statusor_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()
