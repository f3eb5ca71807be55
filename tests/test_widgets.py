"""The sliders of the notebooks (ebp_analysis.slider_widget, show_slider): they redraw in a live kernel, record
the same output in every run without a front end (nbval, nbconvert), and leave the book offline."""
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

import ebp_analysis as analysis

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def _draw_recording(calls):
    def draw(**values):
        calls.append(values)
        fig, ax = plt.subplots(figsize=(2, 1.5))
        ax.plot([0, 1], [0, values["alpha"]])
        return fig
    return draw


def test_a_slider_draws_its_start_values_and_redraws_when_moved():
    calls = []
    box = analysis.slider_widget(_draw_recording(calls), start={"alpha": 2}, alpha=[1, 2, 4], kind=["a", "b"])
    *sliders, out = box.children
    assert calls == [{"alpha": 2, "kind": "a"}]
    assert len(out.outputs) == 1 and out.outputs[0]["data"]["image/png"]
    first = out.outputs[0]["data"]["image/png"]
    sliders[0].value = 4
    assert calls[-1] == {"alpha": 4, "kind": "a"} and out.outputs[0]["data"]["image/png"] != first
    sliders[1].value = "b"
    assert calls[-1] == {"alpha": 4, "kind": "b"} and len(out.outputs) == 1
    assert plt.get_fignums() == []                    # every figure closed: none leaks into the cell's outputs


def test_a_slider_names_bad_input():
    with pytest.raises(ValueError, match="at least one name"):
        analysis.slider_widget(_draw_recording([]))
    with pytest.raises(ValueError, match="no slider"):
        analysis.slider_widget(_draw_recording([]), start={"beta": 1}, alpha=[1, 2])


def test_show_slider_displays_its_description_as_plain_text(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append((obj, raw)))
    analysis.show_slider(_draw_recording([]), "a slider over alpha", alpha=[1, 2])
    (bundle, raw), = shown
    assert raw and bundle["text/plain"] == "a slider over alpha"
    assert set(bundle) == {"text/plain", "application/vnd.jupyter.widget-view+json"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_notebook_stores_widget_state_and_every_slider_follows_a_static_figure(path):
    """Stored widget state would make the book load ipywidgets' scripts from a CDN (myst-nb adds them when a
    notebook has it): execute with --ExecutePreprocessor.store_widget_state=False. The book and nbval show
    the static figure, so the code cell before each slider must have one."""
    notebook = json.loads(path.read_text())
    assert not notebook["metadata"].get("widgets"), f"{path.name} stores widget state: re-execute it without"
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    for before, cell in zip(code, code[1:]):
        if "show_slider(" in "".join(cell["source"]):
            assert any("image/png" in o.get("data", {}) for o in before["outputs"]), "".join(cell["source"])[:80]
