"""The figures of paper 1's notebooks (01, 02, 03, 06), in the shared style."""
from __future__ import annotations

KIND_TITLES = {"qk": "QK (per head)", "ov": "OV (per head)", "mlp_gate": "MLP in: gate", "mlp_up": "MLP in: up",
               "mlp_out": "MLP out"}


def plot_spectra(spectra, floors=None):
    """One panel per matrix kind: singular values vs index for every layer (and head), coloured by layer;
    the quantization noise floor of each measured layer as a dashed line in the layer's colour.
    Numerically zero σ (``null``: the bias row of a model without biases) are left out."""
    import matplotlib.pyplot as plt

    kinds = [k for k in KIND_TITLES if k in set(spectra["kind"])]
    n_layers = int(spectra["layer"].max()) + 1
    cmap = plt.get_cmap("viridis")
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.2 * len(kinds), 3.0), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        part = spectra[(spectra["kind"] == kind) & ~spectra["null"]]
        for (layer, head), group in part.groupby(["layer", "head"]):
            ax.plot(group["index"], group["sigma"], color=cmap(layer / max(n_layers - 1, 1)), lw=0.6,
                    alpha=0.5 if head >= 0 else 0.9)
        if floors is not None:
            for layer, group in floors[floors["kind"] == kind].groupby("layer"):
                ax.axhline(group["floor"].median(), color=cmap(layer / max(n_layers - 1, 1)), ls="--", lw=0.8)
        ax.set_yscale("log")
        ax.set_title(KIND_TITLES[kind])
        ax.set_xlabel("direction index k")
    axes[0][0].set_ylabel("singular value σ_k")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, n_layers - 1))
    fig.colorbar(sm, ax=axes[0].tolist(), label="layer", fraction=0.02)
    return fig


def pruning_at_end(history, lookback: int = 100) -> dict | None:
    """The share of masks above 0.5 at the training's last step and ``lookback`` steps before it (the last
    logged step at or before that), with the steps between: a training whose share still falls at its end was
    still pruning. None when the history is shorter than ``lookback``."""
    steps = history["step"]
    earlier = history[steps <= steps.iloc[-1] - lookback]
    if not len(earlier):
        return None
    return dict(steps=int(steps.iloc[-1] - earlier["step"].iloc[-1]),
                before=float(earlier["kept_fraction_at_half"].iloc[-1]),
                after=float(history["kept_fraction_at_half"].iloc[-1]))


def plot_training(history, lookback: int = 100):
    """KL (log axis) and the % of masks above 0.5 (linear axis) against the optimiser step; the right panel
    says how far the kept share fell over the last ``lookback`` steps (``pruning_at_end``), so that a training
    still pruning at its last step shows as such."""
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.4))
    a.plot(history["step"], history["kl"])
    a.set_yscale("log")
    a.set(xlabel="step", ylabel="KL(full ‖ masked)\ntraining batch")
    b.plot(history["step"], 100 * history["kept_fraction_at_half"])
    b.set(xlabel="step", ylabel="% of masks > 0.5")
    pruning = pruning_at_end(history, lookback)
    if pruning:
        b.set_title(f"{100 * pruning['before']:.1f} % → {100 * pruning['after']:.1f} % over the last {pruning['steps']} steps",
                    fontsize=9)
    fig.tight_layout()
    return fig


def plot_faithfulness(curve, paper_kl: float, metric_label: str, trained=None):
    """KL, task metric and accuracy of binarised circuits vs % of directions kept, with random controls;
    ``trained`` (an α sweep's table) adds the circuits each training found, labelled by α."""
    import matplotlib.pyplot as plt

    x = 100 * curve["kept_fraction"]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3))
    if trained is not None and len(trained):
        tx = 100 * trained["kept_fraction"]
        for ax, column in zip(axes, ("kl", "metric", "accuracy")):
            ax.plot(tx, trained[column], "*", ms=11, color="C3", label="trained circuits (α sweep)")
            ax.plot(tx, trained[f"random_{column}"], "x", color="C3", label="their random controls")
        for xi, yi, a in zip(tx, trained["kl"], trained["alpha"]):
            axes[0].annotate(f"α={a:.2g}", (xi, yi), fontsize=6, xytext=(-4, 4), textcoords="offset points",
                             ha="right")
    partial = curve["kept_fraction"] < 1  # the full model has KL 0: off a log axis
    axes[0].plot(x[partial], curve["kl"][partial], "o-", label="threshold curve (largest masks)")
    axes[0].plot(x[partial], curve["random_kl"][partial], "s--", label="random, same count per block")
    axes[0].axhline(paper_kl, color="grey", ls=":", label=f"paper's KL {paper_kl}")
    axes[0].set(yscale="log", ylabel="held-out KL (full model: 0)")
    axes[1].plot(x, curve["metric"], "o-", label="threshold curve")
    axes[1].plot(x, curve["random_metric"], "s--", label="random control")
    axes[1].axhline(curve["full_metric"].iloc[0], color="black", lw=0.8, label="full model")
    axes[1].set(ylabel=metric_label)
    axes[2].plot(x, curve["accuracy"], "o-", label="threshold curve")
    axes[2].plot(x, curve["random_accuracy"], "s--", label="random control")
    axes[2].axhline(curve["full_accuracy"].iloc[0], color="black", lw=0.8, label="full model")
    axes[2].set(ylabel="accuracy", ylim=(0, 1.02))
    for ax in axes:
        ax.set(xscale="log", xlabel="% of singular directions kept")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(labels))
    fig.tight_layout()
    return fig


def plot_faithfulness_by_percent(curves):
    """MIB-style f(k) of each circuit's ranking (``helpers.singular.masking.scoring.faithfulness_curves``) against the
    mean of random rankings under the same rule, on a log axis of % of directions."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    for i, (label, part) in enumerate(curves.groupby("circuit", sort=False)):
        ax.plot(part["percent"], part["faithfulness"], "o-", color=f"C{i}", ms=3, label=label)
        ax.plot(part["percent"], part["random_faithfulness"], ":", color=f"C{i}", lw=1)
    ax.axhline(1, color="black", lw=0.8)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xscale="log", xlabel="% of singular directions kept (top by the circuit's score)",
           ylabel="faithfulness f(k)", title="solid: the circuit's ranking; dotted: random rankings, same rule")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def plot_head_heatmap(values, title: str, label: str, marked=None, marked_label: str | None = None):
    """A layer × head heatmap; ``marked`` heads [(layer, head), ...] get a box, named ``marked_label`` in
    the legend."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(0.45 * values.shape[1] + 2.4, 0.25 * values.shape[0] + 1.4))
    sns.heatmap(values, ax=ax, cmap="viridis", cbar_kws={"label": label})
    for layer, head in marked or []:
        ax.add_patch(plt.Rectangle((head, layer), 1, 1, fill=False, edgecolor="red", lw=1.5))
    if marked:
        box = plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="red", lw=1.5)
        fig.legend([box], [f"boxed: {marked_label or 'marked heads'}"], loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   fontsize=9, frameon=False)
    ax.set(xlabel="head", ylabel="layer", title=title)
    return fig


def plot_role_terms(frames: dict, titles: dict):
    """Side-by-side heatmaps direction × IOI role (one per entry of ``frames``), diverging around 0."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, axes = plt.subplots(1, len(frames), figsize=(4.2 * len(frames), 0.32 * max(len(f) for f in frames.values()) + 1.6),
                             squeeze=False)
    for ax, (name, frame) in zip(axes[0], frames.items()):
        limit = float(frame.abs().to_numpy().max()) or 1.0
        sns.heatmap(frame, ax=ax, cmap="RdBu_r", center=0, vmin=-limit, vmax=limit, annot=True, fmt=".2g",
                    annot_kws={"fontsize": 6}, cbar=False)
        ax.set(title=titles[name], xlabel="role of the position", ylabel="direction k")
    return fig


def plot_ablation_effects(effects, metric_label: str):
    """Metric change when one direction is ablated (bars), with the range of its σ-matched controls."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(0.35 * len(effects) + 2.5, 3))
    x = range(len(effects))
    labels = [f"{k.upper()} {d}" for k, d in zip(effects["kind"], effects["direction"])]
    ax.bar(x, effects["metric_change"], color=["C0" if b else "C7" for b in effects["beyond_controls"]])
    ax.errorbar(x, effects["control_mean"], yerr=effects["control_max_abs"], fmt="k_", lw=0.8, capsize=2,
                label="σ-matched controls: mean, ± max |Δ|")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(list(x), labels, rotation=90, fontsize=7)
    ax.set(ylabel=f"Δ {metric_label}", title="ablating one direction (blue: beyond all its controls)")
    ax.legend(fontsize=7)
    return fig


def plot_dose_response(table, title: str):
    """% flipped, accuracy and logit diff vs scale s (log axis, only the doses that were run, no line drawn
    from the unsteered model), receptor intervention vs equal-norm random, per site; the unsteered model as a
    dotted line."""
    import matplotlib.pyplot as plt

    columns = ("flipped", "accuracy", "logit_diff")
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    baseline = table[table["intervention"] == "none"][list(columns)].mean()
    for colour, intervention in (("C0", "receptors"), ("C3", "random")):
        for site, style in (("direct", "-"), ("layer", "--")):
            part = table[(table["site"] == site) & (table["intervention"] == intervention)]
            mean = part.groupby("scale")[list(columns)].mean()
            label = f"{'receptors' if intervention == 'receptors' else 'random, equal norm'}, " \
                    f"{'direct path' if site == 'direct' else 'full forward'}"
            for ax, column in zip(axes, columns):
                ax.plot(mean.index, mean[column], style, marker="o", color=colour, label=label)
    for ax, column, ylabel in zip(axes, columns, ("% flipped (of prompts right before)", "accuracy",
                                                  "logit diff correct − wrong")):
        if column in baseline and baseline[column] == baseline[column]:
            ax.axhline(baseline[column], color="0.4", ls=":", lw=1.2, label="not steered")
        ax.set(xlabel="scale s (× the change to the other class's mean)", ylabel=ylabel, xscale="log")
    axes[1].set_ylim(0, 1.02)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, y=1.02)
    fig.tight_layout()
    return fig


def plot_margins(margins, rule: float, title: str):
    """Each head's name-mover margin IO / (S1 + S2) with its bootstrap interval, one marker per prompt set
    (``margins``: rows of ``helpers.singular.heads.case_study.margins_of``), on a log axis with the declared rule's
    bound ``rule`` as a dashed line."""
    import matplotlib.pyplot as plt

    heads = list(dict.fromkeys(margins["label"]))
    sets = list(dict.fromkeys(margins["prompt_set"]))
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(heads) + 1.4))
    for i, name in enumerate(sets):
        part = margins[margins["prompt_set"] == name].set_index("label").loc[heads]
        y = [j + (i - (len(sets) - 1) / 2) * 0.25 for j in range(len(heads))]
        ax.errorbar(part["margin"], y, xerr=[part["margin"] - part["margin_low"], part["margin_high"] - part["margin"]],
                    fmt="o", capsize=3, label=f"{name} prompts")
    ax.axvline(rule, color="black", ls="--", lw=1, label=f"declared rule: {rule:g}×")
    ax.axvline(1, color="C7", lw=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(heads)), heads)
    ax.invert_yaxis()
    ax.set(xlabel="END attention to IO / to S1 + S2 (95 % bootstrap interval over prompts)", title=title)
    ax.legend(fontsize=8, loc="lower right")
    return fig
