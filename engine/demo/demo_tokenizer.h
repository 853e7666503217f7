// The demo checkpoint's tokenizer: a BPE vocabulary trained on the texts in
// tools/bpe_trainer/corpus (embedded in the library), Kimi-style special tokens at the top ids
// and Strata's built-in Kimi chat template.
//
//   ids [0, 7936)     BPE ranks (0..255 are the bytes)
//   ids [7936, 8192)  special tokens: [BOS] [EOS] <|im_end|> <|im_user|> <|im_assistant|>
//                     <|im_system|> <|im_middle|> <|tool_calls_section_begin|>
//                     <|tool_calls_section_end|> <|tool_call_begin|>
//                     <|tool_call_argument_begin|> <|tool_call_end|> [PAD] [UNK] <think>
//                     </think> <|media_start|> <|media_content|> <|media_end|> <|media_pad|>,
//                     then <|reserved_token_ID|>
// `<think>` and `</think>` are added tokens that are not "special" (decode keeps them, so
// reasoning can be split from the answer); the others are special.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::engine::demo {

inline constexpr int32_t kDemoVocabSize = 8192;
inline constexpr int32_t kDemoNumSpecialTokens = 256;
inline constexpr int32_t kDemoNumBpeTokens = kDemoVocabSize - kDemoNumSpecialTokens;

// The training text (tools/bpe_trainer/corpus/*.{txt,md}, in name order).
std::string_view DemoCorpus();

// The 256 special-token strings, in id order from kDemoNumBpeTokens.
std::vector<std::string> DemoSpecialTokens();

// Trains the BPE part (kDemoNumBpeTokens tokens, rank order) on DemoCorpus().
absl::StatusOr<std::vector<std::string>> TrainDemoVocabulary();

// Writes DIR/tiktoken.model and DIR/tokenizer_config.json (creating DIR). Deterministic:
// the same bytes on every run and machine.
absl::Status WriteDemoTokenizer(const std::string& dir);

}  // namespace strata::engine::demo
