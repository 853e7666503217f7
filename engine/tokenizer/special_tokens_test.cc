#include "engine/tokenizer/special_tokens.h"

#include <gtest/gtest.h>

namespace strata::engine {
namespace {

TEST(SpecialTokenMatcherTest, FindsLeftmostThenLongest) {
  SpecialTokenMatcher m({{"<|a|>", 1}, {"<|a|>b", 2}, {"[X]", 3}});
  auto first = m.FindNext("xx[X]<|a|>b", 0);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->pos, 2u);
  EXPECT_EQ(first->id, 3);
  auto second = m.FindNext("xx[X]<|a|>b", 5);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->id, 2);
  EXPECT_EQ(second->length, 6u);
  EXPECT_FALSE(m.FindNext("<|a| [Y]", 0).has_value());
}

TEST(SpecialTokenMatcherTest, EmptyMatcherFindsNothing) {
  SpecialTokenMatcher m;
  EXPECT_FALSE(m.FindNext("<|im_end|>", 0).has_value());
}

}  // namespace
}  // namespace strata::engine
