#include "core/sha256.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

// FIPS 180-4 / NIST example digests.
TEST(Sha256Test, MatchesStandardVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, PaddingBoundaryLengthsDiffer) {
  // 55, 56 and 64 bytes exercise the one- and two-block padding paths.
  EXPECT_NE(Sha256Hex(std::string(55, 'x')), Sha256Hex(std::string(56, 'x')));
  EXPECT_EQ(Sha256Hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256Test, Prefix64IsTheDigestsFirstEightBytes) {
  EXPECT_EQ(Sha256Prefix64("abc"), 0xba7816bf8f01cfeaULL);
  EXPECT_EQ(Sha256Prefix64(""), 0xe3b0c44298fc1c14ULL);
}

}  // namespace
}  // namespace strata
