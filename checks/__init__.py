"""Check harnesses: they check that things agree (the GPU paths, CTranslate2 against our search,
`mt-translate` against the decode stage) rather than measure speed.

What each checks and how: docs/checks.md.
"""
