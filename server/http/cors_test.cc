#include "server/http/cors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace strata::http {
namespace {

std::string Get(const std::vector<Header>& headers, const std::string& name) {
  for (const Header& h : headers) {
    if (h.name == name) return h.value;
  }
  return "<absent>";
}

HttpRequest Preflight(const std::string& origin, const std::string& method,
                      const std::string& headers = "") {
  HttpRequest r;
  r.method = "OPTIONS";
  r.path = r.target = "/v1/chat/completions";
  r.headers = {{"origin", origin}, {"access-control-request-method", method}};
  if (!headers.empty()) r.headers.push_back({"access-control-request-headers", headers});
  return r;
}

TEST(CorsTest, DefaultsAllowEveryOriginWithAStar) {
  const CorsOptions any;
  EXPECT_EQ(Get(CorsResponseHeaders(any, "https://ui.example"), "Access-Control-Allow-Origin"),
            "*");
  EXPECT_TRUE(CorsResponseHeaders(any, "").empty());  // not a cross-origin request
  auto preflight =
      CorsPreflight(any, Preflight("https://ui.example", "POST", "authorization, content-type"));
  ASSERT_TRUE(preflight.has_value());
  EXPECT_EQ(preflight->status, 200);
  EXPECT_EQ(Get(preflight->headers, "Access-Control-Allow-Origin"), "*");
  EXPECT_THAT(Get(preflight->headers, "Access-Control-Allow-Methods"),
              ::testing::HasSubstr("POST"));
  EXPECT_EQ(Get(preflight->headers, "Access-Control-Allow-Headers"),
            "authorization, content-type");  // "*": the requested ones, echoed
  EXPECT_EQ(Get(preflight->headers, "Access-Control-Max-Age"), "600");
}

TEST(CorsTest, PlainOptionsAndOtherMethodsAreNotPreflights) {
  HttpRequest options = Preflight("https://ui.example", "POST");
  options.headers.pop_back();  // no Access-Control-Request-Method
  EXPECT_FALSE(CorsPreflight(CorsOptions(), options).has_value());
  HttpRequest get = Preflight("https://ui.example", "GET");
  get.method = "GET";
  EXPECT_FALSE(CorsPreflight(CorsOptions(), get).has_value());
}

TEST(CorsTest, ListsRestrictOriginsMethodsAndHeadersNamingWhatWasRefused) {
  CorsOptions o;
  o.allowed_origins = {"https://ui.example"};
  o.allowed_methods = {"GET", "POST"};
  o.allowed_headers = {"Authorization"};
  o.allow_credentials = true;
  const std::vector<Header> ok = CorsResponseHeaders(o, "https://ui.example");
  EXPECT_EQ(Get(ok, "Access-Control-Allow-Origin"), "https://ui.example");
  EXPECT_EQ(Get(ok, "Vary"), "Origin");
  EXPECT_EQ(Get(ok, "Access-Control-Allow-Credentials"), "true");
  EXPECT_TRUE(CorsResponseHeaders(o, "https://evil.example").empty());

  auto good = CorsPreflight(o, Preflight("https://ui.example", "post", "Authorization, Accept"));
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->status, 200);
  EXPECT_EQ(Get(good->headers, "Access-Control-Allow-Methods"), "GET, POST");
  EXPECT_THAT(Get(good->headers, "Access-Control-Allow-Headers"),
              ::testing::HasSubstr("Authorization"));
  auto origin = CorsPreflight(o, Preflight("https://evil.example", "POST"));
  ASSERT_TRUE(origin.has_value());
  EXPECT_EQ(origin->status, 400);
  EXPECT_EQ(origin->body, "Disallowed CORS origin 'https://evil.example'");
  auto method = CorsPreflight(o, Preflight("https://ui.example", "DELETE"));
  EXPECT_EQ(method->status, 400);
  EXPECT_EQ(method->body, "Disallowed CORS method 'DELETE'");
  auto header = CorsPreflight(o, Preflight("https://ui.example", "POST", "x-secret"));
  EXPECT_EQ(header->status, 400);
  EXPECT_EQ(header->body, "Disallowed CORS header 'x-secret'");
}

TEST(CorsTest, NoAllowedOriginsMeansNoCors) {
  CorsOptions off;
  off.allowed_origins.clear();
  EXPECT_TRUE(CorsResponseHeaders(off, "https://ui.example").empty());
  EXPECT_EQ(CorsPreflight(off, Preflight("https://ui.example", "POST"))->status, 400);
}

}  // namespace
}  // namespace strata::http
