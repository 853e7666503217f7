#include "server/frontend/reply_tokens.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "server/frontend/testing/scripted_executor.h"

namespace strata::frontend {
namespace {

using ::testing::ElementsAre;
using testing::kImEnd;

// The test tokenizer encodes "hello" as one token (259); its bytes are ids 104 101 108 108 111.
constexpr int32_t kHelloToken = 259;
const std::vector<int32_t> kHelloBytes = {104, 101, 108, 108, 111};

class ReplyTokensTest : public ::testing::Test {
 protected:
  std::vector<int32_t> Encode(const std::string& text) const {
    return tokenizer_->Encode(text, {.add_special_tokens = false, .parse_special = true});
  }
  std::unique_ptr<engine::Tokenizer> tokenizer_ = testing::MakeTestTokenizer();
};

TEST_F(ReplyTokensTest, KeepsOnlyIdsThatDecodeToTheText) {
  ReplyTokenMemory memory(*tokenizer_, 100);
  EXPECT_TRUE(memory.Remember("hello", kHelloBytes));
  EXPECT_THAT(memory.Find("hello"), ::testing::Optional(kHelloBytes));
  EXPECT_EQ(memory.Find("hell"), std::nullopt);
  // Other bytes, a special token the text does not show, nothing at all: not kept.
  EXPECT_FALSE(memory.Remember("hellp", kHelloBytes));
  EXPECT_FALSE(memory.Remember("hello", {104, 101, 108, 108, 111, kImEnd}));
  EXPECT_FALSE(memory.Remember("", {}));
  // Ill-formed UTF-8 kept under the U+FFFD its client was shown.
  EXPECT_TRUE(memory.Remember("a\xEF\xBF\xBD", {'a', 0xC3}));
  EXPECT_THAT(memory.Find("a\xEF\xBF\xBD"), ::testing::Optional(ElementsAre('a', 0xC3)));
  EXPECT_EQ(memory.num_replies(), 2);
  EXPECT_EQ(memory.num_tokens(), 7);
}

TEST_F(ReplyTokensTest, EvictsTheLeastRecentlyUsedToStayWithinItsTokens) {
  ReplyTokenMemory memory(*tokenizer_, 10);
  ASSERT_TRUE(memory.Remember("hello", kHelloBytes));                // 5 tokens
  ASSERT_TRUE(memory.Remember("world", {'w', 'o', 'r', 'l', 'd'}));  // 5 tokens
  ASSERT_TRUE(memory.Find("hello"));                                 // "world" is now the oldest
  ASSERT_TRUE(memory.Remember("abc", {'a', 'b', 'c'}));              // 13 > 10: one must go
  EXPECT_TRUE(memory.Find("hello"));
  EXPECT_FALSE(memory.Find("world"));
  EXPECT_EQ(memory.num_tokens(), 8);
  // Kept again: replaced, not counted twice.
  ASSERT_TRUE(memory.Remember("hello", {kHelloToken}));
  EXPECT_EQ(memory.num_tokens(), 4);
  EXPECT_THAT(memory.Find("hello"), ::testing::Optional(ElementsAre(kHelloToken)));
  // Longer than the whole memory: not kept, and nothing evicted for it.
  EXPECT_FALSE(
      memory.Remember("abcdefghijk", {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k'}));
  EXPECT_EQ(memory.num_replies(), 2);
}

TEST_F(ReplyTokensTest, SplicesAReplyWhereItStandsAndTheTextStaysTheSame) {
  ReplyTokenMemory memory(*tokenizer_, 100);
  ASSERT_TRUE(memory.Remember("hello", kHelloBytes));
  // The user says "hello" too, before the reply: that one keeps its encoding.
  const Json messages = Json::parse(R"([
      {"role": "user", "content": "hello"},
      {"role": "assistant", "content": "hello"},
      {"role": "user", "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]},
      {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}])");
  const std::string prompt =
      "<|im_user|>user<|im_middle|>hello<|im_end|><|im_assistant|>assistant<|im_middle|>hello"
      "<|im_end|><|im_user|>user<|im_middle|>hello<|im_end|><|im_assistant|>assistant"
      "<|im_middle|>hello<|im_end|><|im_assistant|>assistant<|im_middle|>";
  std::vector<int32_t> ids = Encode(prompt);
  const std::string before = *tokenizer_->DecodeBytes(ids);
  EXPECT_EQ(memory.Splice(messages, &ids), 2);
  EXPECT_EQ(memory.num_spliced_total(), 2);
  EXPECT_EQ(*tokenizer_->DecodeBytes(ids), before);
  std::vector<int32_t> assistant = Encode("<|im_assistant|>assistant<|im_middle|>");
  std::vector<int32_t> want = Encode("<|im_user|>user<|im_middle|>hello<|im_end|>");
  for (int turn = 0; turn < 2; ++turn) {
    want.insert(want.end(), assistant.begin(), assistant.end());
    want.insert(want.end(), kHelloBytes.begin(), kHelloBytes.end());
    want.push_back(kImEnd);
    if (turn == 0) {
      const std::vector<int32_t> user = Encode("<|im_user|>user<|im_middle|>hello<|im_end|>");
      want.insert(want.end(), user.begin(), user.end());
    }
  }
  want.insert(want.end(), assistant.begin(), assistant.end());
  EXPECT_EQ(ids, want);
  // The users' "hello" keep their encoding.
  ASSERT_THAT(Encode("hello"), ElementsAre(kHelloToken));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kHelloToken), 2);
}

TEST_F(ReplyTokensTest, LeavesPromptsWhoseRepliesItDoesNotHoldOrCannotFind) {
  ReplyTokenMemory memory(*tokenizer_, 100);
  ASSERT_TRUE(memory.Remember("hello", kHelloBytes));
  struct Case {
    const char* messages;
    const char* prompt;
  };
  for (const Case& c : {
           // Another reply ("hello world" holds the kept "hello" but is not it).
           Case{R"([{"role": "assistant", "content": "hello world"}])",
                "<|im_assistant|>assistant<|im_middle|>hello world<|im_end|>"},
           // A template that did not show the reply as it was.
           Case{R"([{"role": "assistant", "content": "hello"}])",
                "<|im_assistant|>assistant<|im_middle|>Hello<|im_end|>"},
           // No messages array.
           Case{R"({"role": "assistant", "content": "hello"})",
                "<|im_assistant|>assistant<|im_middle|>hello<|im_end|>"},
       }) {
    std::vector<int32_t> ids = Encode(c.prompt);
    const std::vector<int32_t> original = ids;
    EXPECT_EQ(memory.Splice(Json::parse(c.messages), &ids), 0) << c.messages;
    EXPECT_EQ(ids, original) << c.messages;
  }
}

}  // namespace
}  // namespace strata::frontend
