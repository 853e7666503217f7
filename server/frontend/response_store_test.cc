#include "server/frontend/response_store.h"

#include <gtest/gtest.h>

namespace strata::frontend {
namespace {

StoredResponse Entry(const std::string& text) {
  return {Json{{"id", text}}, Json::array({Json{{"role", "user"}, {"content", text}}})};
}

int64_t Bytes(const std::string& id, const StoredResponse& s) {
  return static_cast<int64_t>(id.size() + s.response.dump().size() + s.messages.dump().size());
}

TEST(ResponseStoreTest, KeepsWithinItsBytesDroppingTheLeastRecentlyUsed) {
  const int64_t one = Bytes("a", Entry("a"));
  ResponseStore store(2 * one);
  ASSERT_TRUE(store.Put("a", Entry("a")));
  ASSERT_TRUE(store.Put("b", Entry("b")));
  EXPECT_EQ(store.num_bytes(), 2 * one);
  ASSERT_TRUE(store.Get("a"));  // "b" is now the oldest
  ASSERT_TRUE(store.Put("c", Entry("c")));
  EXPECT_TRUE(store.Get("a"));
  EXPECT_FALSE(store.Get("b"));
  EXPECT_EQ(store.Get("c")->messages[0]["content"], "c");
  EXPECT_EQ(store.num_responses(), 2);
  // Put again under one id: replaced, counted once.
  ASSERT_TRUE(store.Put("c", Entry("c")));
  EXPECT_EQ(store.num_bytes(), 2 * one);
  // Larger than the whole store: not kept, nothing evicted for it, an older copy dropped.
  EXPECT_FALSE(store.Put("a", Entry(std::string(4 * one, 'x'))));
  EXPECT_FALSE(store.Get("a"));
  EXPECT_TRUE(store.Get("c"));
  EXPECT_TRUE(store.Erase("c"));
  EXPECT_FALSE(store.Erase("c"));
  EXPECT_EQ(store.num_responses(), 0);
  EXPECT_EQ(store.num_bytes(), 0);
}

}  // namespace
}  // namespace strata::frontend
