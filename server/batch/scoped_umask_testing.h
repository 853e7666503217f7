// ScopedUmask: the process umask for a test's scope (0: the files' modes come from the code
// alone), restored after it. Test-only; include from *_test.cc files.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

namespace strata::batch {

class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }
  ScopedUmask(const ScopedUmask&) = delete;
  ScopedUmask& operator=(const ScopedUmask&) = delete;

 private:
  const mode_t old_;
};

}  // namespace strata::batch
