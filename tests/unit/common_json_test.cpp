#include <catch2/catch.hpp>

#include "common/json.hpp"

using saker::json::quote;
using saker::json::Writer;

TEST_CASE("json quote escapes quotes, control characters and non-ASCII bytes") {
  CHECK(quote("plain") == "\"plain\"");
  CHECK(quote("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(quote("line\nnext\t") == "\"line\\nnext\\t\"");
  CHECK(quote(std::string("\x01", 1)) == "\"\\u0001\"");
  CHECK(quote("\xc3\xa9") == "\"\\u00c3\\u00a9\"");
}

TEST_CASE("json writer nests objects and arrays with commas in the right places") {
  Writer w;
  w.begin_object().key("id").value(7).key("ok").value(true).key("tags").strings({"a", "b"});
  w.key("nested").begin_object().key("x").value(1.5).key("none").null().end_object();
  w.key("empty").begin_array().end_array().end_object();
  CHECK(w.str() == R"({"id":7,"ok":true,"tags":["a","b"],"nested":{"x":1.5,"none":null},"empty":[]})");
}

TEST_CASE("json writer writes non-finite doubles as null") {
  Writer w;
  w.begin_array().value(1.0 / 0.0).end_array();
  CHECK(w.str() == "[null]");
}
