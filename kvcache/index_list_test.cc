#include "kvcache/internal/index_list.h"

#include <vector>

#include "gtest/gtest.h"

namespace strata::kvcache::internal {
namespace {

std::vector<int32_t> Items(const IndexList& list) {
  std::vector<int32_t> out;
  for (int32_t id = list.Front(); id != IndexList::kNone; id = list.Next(id)) out.push_back(id);
  return out;
}

TEST(IndexListTest, PushPopRemoveKeepOrder) {
  IndexList list(6);
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.Front(), IndexList::kNone);
  list.PushBack(3);
  list.PushBack(1);
  list.PushFront(5);
  list.PushBack(0);
  EXPECT_EQ(Items(list), (std::vector<int32_t>{5, 3, 1, 0}));
  list.Remove(1);
  EXPECT_EQ(Items(list), (std::vector<int32_t>{5, 3, 0}));
  EXPECT_EQ(list.PopFront(), 5);
  EXPECT_EQ(list.Back(), 0);
  EXPECT_EQ(list.size(), 2);
  EXPECT_TRUE(list.Contains(3));
  EXPECT_FALSE(list.Contains(5));
  list.Remove(0);
  list.Remove(3);
  EXPECT_TRUE(list.empty());
  list.PushBack(5);
  EXPECT_EQ(Items(list), (std::vector<int32_t>{5}));
}

TEST(IndexListDeathTest, DoubleInsertCrashes) {
  IndexList list(2);
  list.PushBack(1);
  EXPECT_DEATH(list.PushBack(1), "already in the list");
}

}  // namespace
}  // namespace strata::kvcache::internal
