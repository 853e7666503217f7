// Invariant checks: always on (CHECK) or debug only (DCHECK). A failed check is a bug in Strata,
// not bad input: it prints the condition, the location and an optional streamed message, then
// aborts. Bad input is reported with absl::Status instead (docs/style.md, "Errors").
#pragma once

#include <sstream>

namespace strata::internal {

// Collects the streamed message; its destructor reports and aborts.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Makes `CHECK(x) << ...` a void expression in both branches of the ternary.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace strata::internal

#define CHECK(condition)                        \
  (condition) ? (void)0                         \
              : ::strata::internal::Voidify() & \
                    ::strata::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define STRATA_CHECK_OP(a, op, b) CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_EQ(a, b) STRATA_CHECK_OP(a, ==, b)
#define CHECK_NE(a, b) STRATA_CHECK_OP(a, !=, b)
#define CHECK_LT(a, b) STRATA_CHECK_OP(a, <, b)
#define CHECK_LE(a, b) STRATA_CHECK_OP(a, <=, b)
#define CHECK_GT(a, b) STRATA_CHECK_OP(a, >, b)
#define CHECK_GE(a, b) STRATA_CHECK_OP(a, >=, b)

#ifdef NDEBUG
#define DCHECK(condition) \
  while (false) CHECK(condition)
#else
#define DCHECK(condition) CHECK(condition)
#endif
