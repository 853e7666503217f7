// The demo checkpoint's tokenizer: a BPE vocabulary trained on the texts in engine/demo/corpus
// (embedded in the library) and Kimi-style special tokens at the top ids, in Kimi K3's format
// (the default model's) or Kimi K2's (a Kimi-Linear checkpoint's).
//
//   ids [0, 7936)     BPE ranks (0..255 are the bytes)
//   ids [7936, 8192)  special tokens, laid out as in the released tokenizers' control block:
//     K3: [BOS] [EOS] <|end_of_msg|> <|open|> <|close|> <|sep|> at 7936..7941,
//         <|media_begin|> <|media_content|> <|media_end|> <|media_pad|> at 7954..7957,
//         [PAD] at 8191, <|reserved_token_ID|> elsewhere; eos <|end_of_msg|>; no chat template
//         (Strata's XTML renderer prompts it, docs/k3-format.md).
//     K2: [BOS] [EOS] <|im_end|> <|im_user|> <|im_assistant|> <|im_system|> <|im_middle|>
//         <|tool_calls_section_begin|> <|tool_calls_section_end|> <|tool_call_begin|>
//         <|tool_call_argument_begin|> <|tool_call_end|> [PAD] [UNK] <think> </think>
//         <|media_start|> <|media_content|> <|media_end|> <|media_pad|>, then
//         <|reserved_token_ID|>; Strata's built-in Kimi chat template. `<think>` and `</think>`
//         are added tokens that are not "special" (decode keeps them, so reasoning can be split
//         from the answer); the others are special.
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
// K3's media tokens: their index in the control block (id = its first id + index, as in the
// release: <|media_pad|> = 163584 + 21 = 163605, the config's media_placeholder_token_id).
inline constexpr int32_t kK3MediaBeginIndex = 18;
inline constexpr int32_t kK3MediaContentIndex = 19;
inline constexpr int32_t kK3MediaEndIndex = 20;
inline constexpr int32_t kK3MediaPadIndex = 21;

// The training text (tools/bpe_trainer/corpus/*.{txt,md}, in name order).
std::string_view DemoCorpus();

enum class DemoChatFormat { kKimiK3, kKimiK2 };

// The 256 special-token strings, in id order from kDemoNumBpeTokens.
std::vector<std::string> DemoSpecialTokens(DemoChatFormat format);

// Trains the BPE part (kDemoNumBpeTokens tokens, rank order) on DemoCorpus().
absl::StatusOr<std::vector<std::string>> TrainDemoVocabulary();

// Writes DIR/tiktoken.model and DIR/tokenizer_config.json (creating DIR). Deterministic:
// the same bytes on every run and machine.
absl::Status WriteDemoTokenizer(const std::string& dir, DemoChatFormat format);

}  // namespace strata::engine::demo
