// Streaming detokenization: token ids in, text deltas out.
//
//   bytes of each token ──► pending UTF-8 tail ──► decoded text ──► held back? ──► emitted
//                           (incomplete char)      (U+FFFD for       (could be the
//                                                   ill-formed)       start of a stop)
//
// Contracts:
// * Emitted text is always valid UTF-8 and only ever ends on a character boundary.
// * For any prefix ids[0..k): the concatenated deltas of Add() plus Finish() equal
//   Tokenizer::Decode(ids[0..k), skip_special_tokens) when no stop string matches.
// * Stop strings are found even when they span tokens; text that might begin a stop string is
//   held back until it is known not to. On a match the text before the earliest occurrence is
//   emitted (plus the stop string itself if include_stop_str_in_output), stopped() becomes true
//   and later calls emit nothing.
// Copyable (copying snapshots the stream); not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace strata::engine {

struct DetokenizerOptions {
  bool skip_special_tokens = true;  // vLLM's default
  std::vector<std::string> stop;    // stop strings (empty strings are ignored)
  bool include_stop_str_in_output = false;
  // vLLM's min_tokens: stop strings are not looked for until this many ids were added (a stop
  // string completed by a later id is found even when it began earlier).
  int64_t min_tokens = 0;
};

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  IncrementalDetokenizer(const Tokenizer& tokenizer, DetokenizerOptions options);

  // Feeds one token and returns the text that became final. InvalidArgument for an unknown id
  // (the stream is unchanged).
  absl::StatusOr<std::string> Add(int32_t id);
  // End of stream: returns the held-back text, with an incomplete trailing character as U+FFFD.
  std::string Finish();

  bool stopped() const { return stop_index_.has_value(); }
  // Index into options.stop of the stop string that matched.
  std::optional<size_t> stop_index() const { return stop_index_; }
  // Everything emitted so far.
  const std::string& output() const { return output_; }

 private:
  // Decodes complete characters of pending_ into held_; with `flush` also the incomplete tail.
  void DecodePending(bool flush);
  // Moves final text from held_ to the returned delta (stop-string search and hold-back).
  std::string Release(bool end_of_stream);

  const Tokenizer* tokenizer_;
  DetokenizerOptions options_;
  size_t max_stop_len_ = 0;
  std::string pending_;  // raw bytes of an incomplete trailing character
  std::string held_;     // decoded, not yet emitted
  std::string output_;
  std::optional<size_t> stop_index_;
  int64_t num_ids_ = 0;
};

}  // namespace strata::engine
