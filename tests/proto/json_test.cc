// proto/json.h: reports printed by protobuf's JSON printer. Keys come out sorted whatever the
// order they were set in (the same document is the same text), figures that are not finite are
// null, text is escaped, and what is printed reads back as the same values.
#include "proto/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace graphbandit::json {
namespace {

TEST(JsonTest, KeysAreSortedSoEqualDocumentsPrintTheSameText) {
  Value a = Object({{"b", Integer(2)}, {"a", Integer(1)}, {"10", Integer(10)}, {"2", Integer(3)}});
  Value b = Object({});
  for (const char* key : {"2", "a", "10", "b"}) Set(&b, key, Integer(0));
  Set(&b, "a", Integer(1));
  Set(&b, "b", Integer(2));
  Set(&b, "10", Integer(10));
  Set(&b, "2", Integer(3));
  EXPECT_EQ(Print(a), R"({"10":10,"2":3,"a":1,"b":2})");
  EXPECT_EQ(Print(a), Print(b));
  // Many keys: a hash map's order would show here.
  Value many = Object({});
  for (int i = 99; i >= 0; --i) Set(&many, std::to_string(i), Integer(i));
  const std::string text = Print(many);
  EXPECT_EQ(text.substr(0, 20), R"({"0":0,"1":1,"10":10)");
  for (int repeat = 0; repeat < 5; ++repeat) EXPECT_EQ(Print(many), text);
}

TEST(JsonTest, FiguresThatAreNotFiniteAreNull) {
  const Value v = Object({{"nan", Number(std::nan(""))},
                          {"inf", Number(std::numeric_limits<double>::infinity())},
                          {"x", Number(0.1)},
                          {"big", Integer(int64_t{1} << 40)},
                          {"list", List()}});
  Value list = v;
  Append(&(*list.mutable_struct_value()->mutable_fields())["list"], Number(-2.5));
  Append(&(*list.mutable_struct_value()->mutable_fields())["list"], Null());
  EXPECT_EQ(Print(list),
            R"({"big":1099511627776,"inf":null,"list":[-2.5,null],"nan":null,"x":0.1})");
}

TEST(JsonTest, TextIsEscapedAndReadsBack) {
  const std::string nasty = "quote \" backslash \\ newline \n tab \t bell \x07 é";
  const Value v = Object({{"text", Text(nasty)}, {"yes", Bool(true)}, {"no", Bool(false)}});
  const std::string printed = Print(v);
  EXPECT_EQ(printed.find('\n'), std::string::npos);
  google::protobuf::Value back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(printed, &back).ok()) << printed;
  EXPECT_EQ(back.struct_value().fields().at("text").string_value(), nasty);
  EXPECT_TRUE(back.struct_value().fields().at("yes").bool_value());
  EXPECT_FALSE(back.struct_value().fields().at("no").bool_value());
  // The shortest text that reads back as the same double.
  const double third = 1.0 / 3.0;
  google::protobuf::Value number;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(Print(Number(third)), &number).ok());
  EXPECT_EQ(number.number_value(), third);
}

}  // namespace
}  // namespace graphbandit::json
