// Kimi K3's conversation markup ("XTML", docs/k3-format.md): the control tokens that build every
// element `<|open|>tag attr="v"<|sep|>body<|close|>tag<|sep|>`, and the ids K3's tokenizer gives
// them. Tag names and attribute text are ordinary text; only these are control tokens.
#pragma once

#include <cstdint>
#include <string_view>

namespace strata::engine::xtml {

inline constexpr std::string_view kOpen = "<|open|>";
inline constexpr std::string_view kClose = "<|close|>";
inline constexpr std::string_view kSep = "<|sep|>";
inline constexpr std::string_view kEndOfMessage = "<|end_of_msg|>";  // also K3's EOS
inline constexpr std::string_view kMediaBegin = "<|media_begin|>";
inline constexpr std::string_view kMediaContent = "<|media_content|>";
inline constexpr std::string_view kMediaEnd = "<|media_end|>";
inline constexpr std::string_view kMediaPad = "<|media_pad|>";

// K3's ids (its tokenizer defines them; a checkpoint's own tokenizer files decide at run time).
inline constexpr int32_t kEndOfMessageId = 163586;
inline constexpr int32_t kOpenId = 163587;
inline constexpr int32_t kCloseId = 163588;
inline constexpr int32_t kSepId = 163589;

}  // namespace strata::engine::xtml
