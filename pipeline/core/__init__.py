"""The foundation every layer may use: params and their validation (`config`), the project's errors
and one-line failures (`errors`), atomic writes (`io`), device and precision choice (`device`), and
sacreBLEU scoring (`metrics`). Imports nothing from the layers above.
"""
