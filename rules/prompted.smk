# The prompted arm (config `prompted`, workflow_scripts/workflow/prompted.py; docs/prompted.md):
# each decoder backbone prompted through lm-evaluation-harness on the test rows the fine-tuned
# arm scores, as it is and after each intermediate phase, and a table per backbone that sets
# fine-tuned zero-shot transfer beside prompted 0- and k-shot. The rules exist in every config;
# `all` asks for their outputs only with prompted.enabled on.


rule evaluate_prompted:
    """One model prompted on one task in every language at every shot count (lm-eval's prompts and metrics)."""
    input:
        model=lambda w: prompted_grid.model_dir(config, w.backbone, w.intermediate, w.run),
        # the pretrained checkpoint: its LM head and tokenizer
        base=lambda w: backbone_grid.base_dir(config, w.backbone),
        test=lambda w: prompted_grid.data_files(config, w.task)["test"],
        shots=lambda w: prompted_grid.data_files(config, w.task)["shots"],
    output:
        prompted=f"{RESULTS}/prompted/{{backbone}}/{{intermediate}}/{{run}}/{{task}}.json",
        # the documents and task configs handed to lm-eval (kept: they are what it read)
        work=directory(f"{RESULTS}/prompted/{{backbone}}/{{intermediate}}/{{run}}/{{task}}.lm_eval"),
    log:
        f"{LOGS}/evaluate_prompted/{{backbone}}/{{intermediate}}/{{run}}/{{task}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/evaluate_prompted/{{backbone}}/{{intermediate}}/{{run}}/{{task}}.tsv"
    wildcard_constraints:
        run=f"{prompted_grid.PRETRAINED}|seed[0-9]+",
    params:
        settings=settings(prompted_grid.settings, "backbone", "task"),
        run=lambda w: PromptedIdentity(backbone=w.backbone, config=w.intermediate, run=w.run, task=w.task).to_json(),
        code=module_digest("evaluation.prompted"),
        # lm-eval's installed task folder: its prompts, metrics and utils
        lm_eval=lambda w: prompted_grid.task_files_digest(w.task),
        tasks=job_tasks(lambda w: [w.task]),
    threads: res("evaluate_prompted", "threads")
    resources:
        **gpu_resources(
            "evaluate_prompted", lambda w: prompted_grid.gpus(config, w.backbone, res("evaluate_prompted", "gpu"))
        ),
        mem_mb=res("evaluate_prompted", "mem_mb"),
        runtime=job_runtime("evaluate_prompted"),
        # enough GPUs of the backbone's kind to hold its weights (workflow/prompted.py)
    conda:
        "../envs/training.yaml"
    shell:
        "bind_gpus {resources.gpu}; python -m workflow_scripts.evaluation.prompted --settings {params.settings:q} --run {params.run:q}"
        " --model {input.model} --base {input.base} --test {input.test} --shots {input.shots}"
        " --work {output.work} --threads {threads} --output {output.prompted} > $(fresh_log {log:q}) 2>&1"


rule tabulate_prompted:
    """A backbone's fine-tuned-versus-prompted table: per task and language, zero-shot transfer beside prompted 0- and k-shot, with the English-vs-rest gap."""
    input:
        prompted=lambda wildcards: prompted_grid.result_files(config, wildcards.backbone),
        runs=rules.aggregate_tables.output.runs_csv,
    output:
        md=f"{RESULTS}/tables/{{backbone}}/prompted.md",
        csv=f"{RESULTS}/tables/{{backbone}}/prompted.csv",
        html=report(
            f"{RESULTS}/tables/{{backbone}}/prompted.html",
            caption="../report/prompted.rst",
            category="Prompted",
            labels={"backbone": "{backbone}", "table": "fine-tuned and prompted"},
        ),
    log:
        f"{LOGS}/tabulate_prompted/{{backbone}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/tabulate_prompted/{{backbone}}.tsv"
    params:
        settings=lambda wildcards: settings_json(prompted_grid.table_settings(config, wildcards.backbone)),
        code=module_digest("reporting.prompted"),
        pages=table_pages(html="md"),
        page_code=module_digest("reporting.html_page"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.prompted --settings {params.settings:q} --prompted {input.prompted}"
        " --runs {input.runs} --md {output.md} --csv {output.csv} > $(fresh_log {log:q}) 2>&1"
        " && python -m workflow_scripts.reporting.html_page {params.pages} >> {log:q} 2>&1"


rule compare_prompted:
    """Fine-tuned and prompted transfer gaps of every prompted backbone against its size."""
    input:
        prompted=expand(rules.tabulate_prompted.output.csv, backbone=prompted_grid.backbones(config)),
        backbones=backbone_grid.base_dirs(config, prompted_grid.backbones(config)),
    output:
        md=f"{RESULTS}/tables/prompted_scaling.md",
        csv=f"{RESULTS}/tables/prompted_scaling.csv",
        html=report(
            f"{RESULTS}/tables/prompted_scaling.html",
            caption="../report/prompted_scaling.rst",
            category="Prompted",
            labels={"backbone": "all", "table": "fine-tuned and prompted, by backbone size"},
        ),
        png=report(
            f"{RESULTS}/figures/prompted_scaling.png",
            caption="../report/prompted_scaling.rst",
            category="Prompted",
            labels={"backbone": "all", "figure": "transfer gap, fine-tuned and prompted, by backbone size"},
        ),
        svg=f"{RESULTS}/figures/prompted_scaling.svg",
    log:
        f"{LOGS}/compare_prompted.log",
    benchmark:
        f"{RESULTS}/benchmarks/compare_prompted.tsv"
    params:
        settings=lambda wildcards: settings_json(prompted_grid.scaling_settings(config)),
        tables=lambda wildcards, output: os.path.dirname(output.md),
        models=lambda wildcards, input: os.path.dirname(input.backbones[0]),
        figure=lambda wildcards, output: os.path.splitext(output.png)[0],
        code=module_digest("reporting.prompted_scaling"),
        pages=table_pages(html="md"),
        page_code=module_digest("reporting.html_page"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.prompted_scaling --settings {params.settings:q}"
        " --tables {params.tables} --models {params.models} --md {output.md} --csv {output.csv}"
        " --figure {params.figure} > $(fresh_log {log:q}) 2>&1"
        " && python -m workflow_scripts.reporting.html_page {params.pages} >> {log:q} 2>&1"
