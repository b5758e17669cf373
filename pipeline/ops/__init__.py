"""What users run: `mt-translate` (`cli`), the Prefect flow (`flow`), champion promotion
(`promotion`), the CTranslate2 export command (`export`), the results page (`report`), the
robustness set (`robustness`) and `dvc.yaml` read as data for the flow and the GPU check (`dvc_index`).
The top layer; the recipe study that chose the defaults lives outside the library, in `study/`.
"""
