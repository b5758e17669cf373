"""What users run: `mt-translate` (`cli`), the Prefect flow (`flow`), champion promotion
(`promotion`), the CTranslate2 export command (`export`), the experiments table (`experiments`),
the results page (`report`) and the robustness set (`robustness`). The top layer.
"""
