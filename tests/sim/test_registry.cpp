// The registry's run-time extension (kvsim::register_policy, what kvsim.register_policy uses):
// a policy added at run time is found, listed after the built-in ones and replayed like them;
// registering its name again replaces it in place; a built-in name is refused. Its own
// program: the policy it adds would join test_sim's loops over every policy.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "hand_cases.hpp"
#include "kvtrace/error.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"

namespace {

// Evicts the newest cached positions but `step` itself (keep the oldest B - 1 and the new one).
class KeepOldest final : public kvsim::Policy {
 public:
  void reset(const kvsim::GroupContext&) override {}
  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    for (int64_t k = 0; k < excess; ++k) victims.push_back(cache[cache.size() - 2 - static_cast<size_t>(k)]);
  }
};

kvsim::PolicyInfo keep_oldest(const std::string& summary) {
  kvsim::PolicyInfo info;
  info.name = "test-keep-oldest";
  info.summary = summary;
  info.needs_attention = false;
  info.make = [](const kvsim::Params&) { return std::make_unique<KeepOldest>(); };
  return info;
}

}  // namespace

TEST(Registry, RunTimePolicyIsFoundListedAndReplayed) {
  const size_t built_in = kvsim::policies().size();
  const kvsim::PolicyInfo& h2o = kvsim::find_policy("h2o");
  kvsim::register_policy(keep_oldest("first"));
  ASSERT_EQ(kvsim::policies().size(), built_in + 1);
  EXPECT_EQ(kvsim::policies().back().name, "test-keep-oldest");
  EXPECT_EQ(&kvsim::find_policy("h2o"), &h2o);  // the built-in entries did not move
  const kvsim::PolicyInfo& added = kvsim::find_policy("test-keep-oldest");
  EXPECT_EQ(added.summary, "first");

  // Trace A at B = 2: t2 C={0,1,2}, evict 1; t3 C={0,2,3}, evict 2; t4 {0,3,4} evict 3;
  // t5 {0,4,5} evict 4. r = 1, 1, .5+.1+.4 = 1, .4+.15+.4 = .95, .3+.1+.3 = .7, .25+.1+.2 = .55.
  const auto r = hand::replay1(hand::kA, "test-keep-oldest", 2);
  hand::expect_caches(r, {{0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}});
  hand::expect_retention(r, 0, {1, 1, 1, 0.95, 0.7, 0.55});
  hand::expect_eviction_steps(r, {-1, 2, 3, 4, 5, -1});

  kvsim::register_policy(keep_oldest("second"));  // replaced in place
  EXPECT_EQ(kvsim::policies().size(), built_in + 1);
  EXPECT_EQ(&kvsim::find_policy("test-keep-oldest"), &added);
  EXPECT_EQ(added.summary, "second");

  kvsim::PolicyInfo clash = keep_oldest("x");
  clash.name = "h2o";
  try {
    kvsim::register_policy(clash);
    FAIL() << "a built-in name was replaced";
  } catch (const kvtrace::InputError& e) {
    EXPECT_STREQ(e.what(), "policy 'h2o' is built in and cannot be replaced");
  }
  EXPECT_EQ(kvsim::find_policy("h2o").summary, h2o.summary);
}

// kvpress's names of the presses kvsim ports resolve to the kvsim policy (its entry, so its
// results carry the kvsim name); a near miss is refused with the name it resembles.
TEST(Registry, KvpressNamesResolveToThePolicy) {
  for (const auto& [alias, name] : std::vector<std::pair<std::string, std::string>>{
           {"SnapKVPress", "snapkv"},
           {"snapkv_press", "snapkv"},
           {"StreamingLLMPress", "streaming"},
           {"TOVAPress", "tova"},
           {"ObservedAttentionPress", "observed-attention"},
           {"expected_attention_press", "expected-attention"},
           {"KnormPress", "knorm"},
           {"KeyDiffPress", "keydiff"},
           {"LagKVPress", "lagkv"},
           {"PyramidKVPress", "pyramidkv"},
           {"RandomPress", "random"}}) {
    EXPECT_EQ(&kvsim::find_policy(alias), &kvsim::find_policy(name)) << alias;
    EXPECT_EQ(kvsim::canonical_policy_name(alias), name);
    ASSERT_NE(kvsim::kvpress_alias(name), nullptr) << name;
  }
  EXPECT_EQ(kvsim::choose_policy("SnapKVPress", {{"window", "16"}}).label, "snapkv(window=16)");
  EXPECT_EQ(kvsim::choose_policies({"KnormPress", "snapkv"}, std::vector<std::string>{"SnapKVPress.window=8"})[1].label,
            "snapkv(window=8)");
  EXPECT_THROW(kvsim::choose_policies({"SnapKVPress", "snapkv"}, std::vector<std::string>{}), kvtrace::InputError);
  EXPECT_EQ(kvsim::kvpress_alias("h2o"), nullptr);  // kvpress has no H2O press
  EXPECT_EQ(kvsim::canonical_policy_name("nothing"), "nothing");
  try {
    kvsim::find_policy("snapkv-press");
    FAIL() << "a near miss resolved";
  } catch (const kvtrace::InputError& e) {
    EXPECT_STREQ(e.what(), "unknown policy 'snapkv-press' (did you mean snapkv?)");
  }
  kvsim::PolicyInfo clash = keep_oldest("x");
  clash.name = "SnapKVPress";
  EXPECT_THROW(kvsim::register_policy(clash), kvtrace::InputError);
}

// A name matches whatever its case (H2O, SnapKVPress, SNAPKV_PRESS, SnapKV+Block) and the
// results carry the kvsim name; a name a letter or two off is refused with the nearest one.
TEST(Registry, NamesMatchWhateverTheirCase) {
  EXPECT_EQ(&kvsim::find_policy("H2O"), &kvsim::find_policy("h2o"));
  EXPECT_EQ(&kvsim::find_policy("SNAPKVPRESS"), &kvsim::find_policy("snapkv"));
  EXPECT_EQ(&kvsim::find_policy("Snapkv_Press"), &kvsim::find_policy("snapkv"));
  EXPECT_EQ(kvsim::canonical_policy_name("H2O"), "h2o");
  EXPECT_EQ(kvsim::canonical_policy_name("SnapKV+BLOCK"), "snapkv+block");
  EXPECT_EQ(&kvsim::find_policy("SnapKV+Block"), &kvsim::find_policy("snapkv+block"));
  EXPECT_EQ(kvsim::choose_policy("H2O", {}).label, "h2o");
  EXPECT_EQ(kvsim::choose_policies({"SnapKV"}, std::vector<std::string>{"SNAPKV.window=8"}).front().label,
            "snapkv(window=8)");
  EXPECT_THROW(kvsim::choose_policies({"H2O", "h2o"}, std::vector<std::string>{}), kvtrace::InputError);
  for (const auto& [given, nearest] : std::vector<std::pair<std::string, std::string>>{
           {"h2", "h2o"}, {"scisorhands", "scissorhands"}, {"Streamng", "streaming"}, {"snapkvpres", "snapkv"}}) {
    try {
      kvsim::find_policy(given);
      FAIL() << given << " resolved";
    } catch (const kvtrace::InputError& e) {
      EXPECT_EQ(std::string(e.what()), "unknown policy '" + given + "' (did you mean " + nearest + "?)");
    }
  }
  try {
    kvsim::find_policy("zzzzzzzz");
    FAIL() << "a name far from every policy resolved";
  } catch (const kvtrace::InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("unknown policy 'zzzzzzzz' (known: ", 0), 0u) << e.what();
  }
  kvsim::PolicyInfo clash = keep_oldest("x");
  clash.name = "H2O";  // would shadow h2o, whose name it matches
  EXPECT_THROW(kvsim::register_policy(clash), kvtrace::InputError);
}
