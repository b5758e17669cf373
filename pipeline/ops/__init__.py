"""What users run: `mt-translate` (`cli`), the Prefect flow (`flow`), champion promotion
(`promotion`), the CTranslate2 export command (`export`), the experiments table (`experiments`),
the results page (`report`), the robustness set (`robustness`) and `dvc.yaml` read as data for
the flow and the GPU check (`dag`). The top layer.
"""
