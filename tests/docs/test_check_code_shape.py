#!/usr/bin/env python3
"""check_code_shape.py's reading of C++ and of numbered history, on small made-up sources."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_code_shape as shape  # noqa: E402


def body(lines):
    return "".join(f"  x += {i};\n" for i in range(lines))


class Functions(unittest.TestCase):
    def lengths(self, text):
        return {name: length for _, name, length in shape.functions(text)}

    def test_counts_from_signature_to_closing_brace(self):
        text = "namespace a {\nint f(int x) {\n" + body(3) + "  return x;\n}\n}  // namespace a\n"
        self.assertEqual(self.lengths(text), {"f": 6})

    def test_methods_constructors_and_members(self):
        text = ("class C {\n public:\n  C() : v_{1}, w_(2) {\n    go();\n  }\n"
                "  int get() const { return v_; }\n int v_{0}, w_;\n};\n"
                "auto C::run(int a) -> int {\n  return a;\n}\n")
        self.assertEqual(self.lengths(text), {"C": 3, "get": 1, "C::run": 3})

    def test_lambdas_blocks_and_braces_in_strings_belong_to_the_function(self):
        text = ("void f() {\n  auto g = [&] {\n    if (x) {\n      y();\n    }\n  };\n"
                "  const char* s = \"}{\";  // }\n  /* { */\n}\nvoid h() {}\n")
        self.assertEqual(self.lengths(text), {"f": 9, "h": 1})

    def test_initialisers_and_control_statements_are_not_functions(self):
        text = "const int k[] = {1, 2};\nstruct S {\n  int a = 0;\n};\nenum class E { a, b };\n"
        self.assertEqual(self.lengths(text), {})


class Check(unittest.TestCase):
    def run_check(self, files, allow=None):
        with tempfile.TemporaryDirectory() as root:
            for path, text in files.items():
                os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                    f.write(text)
            args = [sys.executable, shape.__file__, root]
            if allow is not None:
                with open(os.path.join(root, "allow.txt"), "w", encoding="utf-8") as f:
                    f.write(allow)
                args += ["--allow", os.path.join(root, "allow.txt")]
            result = subprocess.run(args, capture_output=True, text=True)
            return result.returncode, result.stdout

    def test_long_function_fails_with_its_place_unless_it_says_why(self):
        long_function = "int big() {\n" + body(100) + "  return x;\n}\n"
        rc, out = self.run_check({"sim/a.cpp": "// Big.\n" + long_function})
        self.assertEqual(rc, 1)
        self.assertIn("sim/a.cpp:2: big (103 lines)", out)
        rc, _ = self.run_check({"sim/a.cpp": "// Big.\n// long: the reference's order.\n" + long_function})
        self.assertEqual(rc, 0)
        rc, _ = self.run_check({"tests/a.cpp": long_function})
        self.assertEqual(rc, 0)

    def test_allowlist_only_shrinks(self):
        long_function = "int big() {\n" + body(100) + "}\n"
        rc, out = self.run_check({"sim/a.cpp": long_function}, allow="sim/a.cpp: big\n")
        self.assertEqual(rc, 0)
        self.assertIn("note: sim/a.cpp:1: big", out)
        rc, out = self.run_check({"sim/a.cpp": "int big() {\n}\n"}, allow="sim/a.cpp: big\n")
        self.assertEqual(rc, 1)
        self.assertIn("no longer long", out)

    def test_numbered_history_fails_outside_the_history_files(self):
        text = "Measured at %s 12; see %s #3.\n" % ("stop", "issue")  # spelled so as not to match here
        rc, out = self.run_check({"docs/a.md": text, "CHANGELOG.md": text, "bench/history.md": text})
        self.assertEqual(rc, 1)
        self.assertEqual(out.count("names a numbered issue or stop"), 1)
        self.assertIn("docs/a.md:1:", out)


if __name__ == "__main__":
    unittest.main()
