#include <catch2/catch.hpp>

#include "core/common.h"
#include "tasks/scoring.h"

using namespace mnemo;

TEST_CASE("RULER string_match_all and post-processing", "[scoring]") {
  // One reference (single needle): 1 if it occurs anywhere, case-insensitively.
  CHECK(string_match_all(" 1234567.", {"1234567"}) == 1.0);
  CHECK(string_match_all("The number is 123456", {"1234567"}) == 0.0);
  CHECK(string_match_all("UUID: 4F9A-Beef", {"4f9a-beef"}) == 1.0);
  // Several references: the fraction found (RULER: mean over refs of r.lower() in pred.lower()).
  CHECK(string_match_all("7 and 9", {"7", "9", "8", "1"}) == 0.5);
  CHECK_THROWS_AS(string_match_all("x", {}), Error);
  // strip; control characters -> "\n"; strip.
  CHECK(ruler_postprocess("  abc\tdef\x01  \n") == "abc\ndef");
  CHECK(ruler_postprocess("\x02\x03 x") == "x");
  CHECK(mean_percent({1, 0, 1}) == 66.67);
  CHECK(mean_percent({}) == 0.0);
}

TEST_CASE("exact match and contains", "[scoring]") {
  CHECK(exact_match(" Paris\n", "Paris") == 1.0);
  CHECK(exact_match("paris", "Paris") == 0.0);
  CHECK(contains_any("It is PARIS, France", {"london", "paris"}) == 1.0);
  CHECK(contains_any("Berlin", {"london", "paris"}) == 0.0);
  CHECK(strip("\x1f a b \x0b") == "a b");
}

TEST_CASE("BABILong compare_answers follows the reference label-set rule", "[scoring]") {
  const auto& rooms = babilong_task_labels("qa1");
  // The target is the only label in the first sentence of the output.
  CHECK(babilong_compare_answers("kitchen", "The most recent location of Mary is kitchen.", "Where is Mary?", rooms));
  CHECK_FALSE(babilong_compare_answers("kitchen", "kitchen or bathroom", "Where is Mary?", rooms));
  CHECK_FALSE(babilong_compare_answers("kitchen", "bathroom", "Where is Mary?", rooms));
  // Cut at the first "." and at "<context>" / "<example>".
  CHECK(babilong_compare_answers("hallway", "Hallway. Then the kitchen", "Where is John?", rooms));
  CHECK(babilong_compare_answers("hallway", "hallway <context> office", "Where is John?", rooms));
  CHECK(babilong_compare_answers("hallway", "hallway<example>office", "Where is John?", rooms));
  // The reference splits at "Question" after lower-casing: never matches, so no cut.
  CHECK_FALSE(babilong_compare_answers("bathroom", "bathroom Question: kitchen", "Where is John?", rooms));
  // Labels that occur in the question are never targets and are ignored in the output (qa4).
  const auto& qa4 = babilong_task_labels("qa4");
  CHECK(babilong_compare_answers("bedroom", "The kitchen is south of the bedroom", "What is the kitchen south of?", qa4));
  CHECK_FALSE(babilong_compare_answers("kitchen", "kitchen", "What is the kitchen south of?", qa4));
  // qa5: capitalised labels are compared lower-cased.
  const auto& qa5 = babilong_task_labels("qa5");
  CHECK(babilong_compare_answers("Fred", "fred", "Who did Mary give the apple to?", qa5));
  CHECK(babilong_compare_answers("Fred", "Fred gave the milk", "Who received the milk?", qa5));  // milk: in question
  CHECK_FALSE(babilong_compare_answers("Fred", "Fred gave the apple", "Who received the milk?", qa5));
  // qa8 multi-answer: every sub-target and nothing else.
  const auto& qa8 = babilong_task_labels("qa8");
  CHECK(babilong_compare_answers("apple,milk", "apple,milk", "What is Daniel carrying?", qa8));
  CHECK(babilong_compare_answers("football,apple", "apple and football", "What is John carrying?", qa8));
  CHECK_FALSE(babilong_compare_answers("apple,milk", "apple", "What is Daniel carrying?", qa8));
  CHECK_FALSE(babilong_compare_answers("apple,milk", "apple, milk, football", "What is Daniel carrying?", qa8));
  CHECK(babilong_compare_answers("nothing", "nothing", "What is Sandra carrying?", qa8));
  // qa19: "s,s" has length 3 and goes through the single-label branch.
  const auto& qa19 = babilong_task_labels("qa19");
  CHECK(babilong_compare_answers("s,s", "s,s", "How do you go from the bathroom to the hallway?", qa19));
  CHECK_FALSE(babilong_compare_answers("s,s", "s,e", "How do you go from the bathroom to the hallway?", qa19));
  // qa6: "no" is a substring of "know", as in the reference.
  const auto& qa6 = babilong_task_labels("qa6");
  CHECK(babilong_compare_answers("yes", "yes", "Is John in the kitchen?", qa6));
  CHECK_FALSE(babilong_compare_answers("yes", "yes, I know", "Is John in the kitchen?", qa6));
  CHECK(babilong_preprocess_output("The Kitchen. Office") == "the kitchen");
  CHECK_THROWS_WITH(babilong_task_labels("qa21"), Catch::Contains("qa21"));
  CHECK(babilong_task_labels("qa20").size() == 7);
  CHECK(babilong_task_labels("qa19").size() == 12);
}

TEST_CASE("BABILong substring scorer is the looser option", "[scoring]") {
  CHECK(substring_match("kitchen", "The KITCHEN or the bathroom"));
  CHECK_FALSE(substring_match("kitchen", "bathroom"));
  // The strict scorer rejects what substring accepts when two labels appear.
  CHECK_FALSE(babilong_compare_answers("kitchen", "The KITCHEN or the bathroom", "Where is Mary?",
                                       babilong_task_labels("qa1")));
}

TEST_CASE("per-example token accuracy averages examples, skipping unlabelled ones", "[scoring]") {
  const int64_t I = -100;
  // ex 0: 1 of 2 labelled right (0.5); ex 1: 1 of 1 (1.0); ex 2: no labels (excluded).
  std::vector<std::vector<int64_t>> preds = {{5, 6, 7}, {1, 2}, {3}};
  std::vector<std::vector<int64_t>> labels = {{I, 6, 8}, {I, 2}, {I}};
  CHECK(per_example_accuracy(preds, labels) == Approx(0.75));  // token-weighted would be 2/3
  CHECK(per_example_accuracy({{1}}, {{I}}) == 0.0);
  CHECK(per_example_accuracy(std::vector<std::vector<int64_t>>{}, {}) == 0.0);
  CHECK_THROWS_AS(per_example_accuracy({{1, 2}}, {{1}}), Error);
  CHECK_THROWS_AS(per_example_accuracy({{1}}, {{1}, {2}}), Error);
}
