"""READ SERIES: every setting, on tiny files whose images, targets and classes are worked by hand.

Conventions being checked (see convnet/data/series.py): a window of w values is a case when a
value follows it; the image is RESOLUTION rows (row 0 = highest values) by w columns; the vertical
span max(q, range) is centred on the window's mid-range and cut into RESOLUTION equal bands.
Pictures below are written top row first, '#' = 1.0 (path), '.' = 0.0; several windows of one
data set sit side by side, separated by blanks.
"""

import math

import numpy as np
import pytest

from convnet.data.series import SeriesInfo, SeriesSettings, read_series, split_fields
from convnet.errors import ConvnetError

LN2 = math.log(2.0)


def write(tmp_path, text, name="series.txt"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def series_file(tmp_path, values, name="series.txt"):
    return write(tmp_path, "".join(f"{v}\n" for v in values), name)


def pictures(rows):
    """Hand-drawn pictures -> array (n_windows, 1, n_rows, n_cols): '#' is the path, -1 (drawn
    black), '.' the background, +1 (white), as the book draws a series."""
    per_row = [r.split() for r in rows]
    n = len(per_row[0])
    out = np.array([[[[-1.0 if ch == "#" else 1.0 for ch in row[k]] for row in per_row]]
                    for k in range(n)])
    assert set("".join(rows)) <= set("#. ")
    return out


# ---------------------------------------------------------------------------------- imaging
def test_image_of_each_window_by_hand(tmp_path):
    # 1 2 4 3.5 5, window 3, resolution 4, FRAC FULL 0: windows [1 2 4] (range 3) and [2 4 3.5]
    # (range 2); q = largest range = 3.
    # [1 2 4]: span 3 from 1: bands floor((v-1)*4/3) = 0, 1, 4->3.
    # [2 4 3.5]: span 3 centred on 3, from 1.5: bands 0 (0.67), 3 (3.33), 2 (2.67).
    path = series_file(tmp_path, [1, 2, 4, 3.5, 5])
    d = read_series(path, SeriesSettings(window=3, resolution=4, frac_full=0.0))
    assert d.source == "SERIES"
    assert d.inputs.shape == (2, 1, 4, 3) and d.inputs.dtype == np.float64
    assert d.inputs.flags["C_CONTIGUOUS"]
    expected = pictures(["..# .##",
                         "..# .##",
                         ".## .#.",
                         "##. ##."])
    np.testing.assert_array_equal(d.inputs, expected)
    np.testing.assert_array_equal(d.series_cases.windows, [[1, 2, 4], [2, 4, 3.5]])
    np.testing.assert_array_equal(d.targets, [3.5, 5])
    assert d.series.q == 3.0
    assert (d.rows, d.cols, d.bands, d.n_cases) == (4, 3, 1, 2)


# Series for the FRAC FULL tests: window 2 over 10 11 13 17 25 24 22 23 gives six windows with
# ranges 1 2 4 8 1 2 (sorted 1 1 2 2 4 8) and targets 13 17 25 24 22 23. Resolution 5.
SCALE_VALUES = [10, 11, 13, 17, 25, 24, 22, 23]

FRAC_CASES = [
    # f = 0: q = the largest range, 8; every window is drawn on a span of 8.
    #   [10 11] from 6.5: bands floor(3.5*5/8)=2, floor(4.5*5/8)=2      [11 13] from 8: 1, 3
    #   [13 17] from 11: 1, 3     [17 25] from 17: 0, 5->4     [25 24] from 20.5: 2, 2
    #   [24 22] from 19: 3, 1
    (0.0, 8.0, [".. .. .. .# .. ..",
                ".. .# .# .# .. ##",
                "## .# .# .# ## .#",
                ".. ## ## .# .. .#",
                ".. .. .. ## .. .."]),
    # f = 0.2: q = the 0.8 quantile, position 0.8 * 5 = 4 in the sorted ranges = 4.
    #   [10 11] from 8.5: 1 (1.875), 3 (3.125)    [11 13] from 10: 1 (1.25), 3 (3.75)
    #   [13 17] range 4 = q: 0, 4    [17 25] range 8 > q, own range: 0, 4
    #   [25 24] from 22.5: 3 (3.125), 1 (1.875)   [24 22] from 21: 3 (3.75), 1 (1.25)
    (0.2, 4.0, [".. .. .# .# .. ..",
                ".# .# .# .# ## ##",
                ".# .# .# .# .# .#",
                "## ## .# .# .# .#",
                ".. .. ## ## .. .."]),
    # f = 1: q = the smallest range, 1: every window fills the height on its own.
    (1.0, 1.0, [".# .# .# .# ## ##",
                ".# .# .# .# .# .#",
                ".# .# .# .# .# .#",
                ".# .# .# .# .# .#",
                "## ## ## ## .# .#"]),
]


@pytest.mark.parametrize("frac, q, picture", FRAC_CASES)
def test_frac_full(tmp_path, frac, q, picture):
    path = series_file(tmp_path, SCALE_VALUES)
    d = read_series(path, SeriesSettings(window=2, resolution=5, frac_full=frac))
    assert d.series.q == pytest.approx(q)
    np.testing.assert_array_equal(d.inputs, pictures(picture))
    np.testing.assert_array_equal(d.targets, [13, 17, 25, 24, 22, 23])


def test_default_frac_full_is_0_2(tmp_path):
    path = series_file(tmp_path, SCALE_VALUES)
    d = read_series(path, SeriesSettings(window=2, resolution=5))
    assert d.series.q == pytest.approx(4.0)
    assert d.series.frac_full == 0.2


def test_flat_series_is_drawn_in_the_middle_band(tmp_path):
    # Every window is flat, so q = 0 and the span is zero: band resolution // 2 = 2 of 5 (row 2).
    path = series_file(tmp_path, [7, 7, 7, 7, 7])
    d = read_series(path, SeriesSettings(window=3, resolution=5))
    assert d.n_cases == 2 and d.series.q == 0.0
    expected = pictures(["...", "...", "###", "...", "..."])
    np.testing.assert_array_equal(d.inputs[0], expected[0])
    np.testing.assert_array_equal(d.inputs[1], expected[0])


def test_defaults_are_those_of_the_spec():
    s = SeriesSettings()
    assert (s.column, s.window, s.resolution, s.shift, s.transform, s.frac_full, s.target_diff,
            s.class_mode, s.header) == (1, 16, 16, 1, "RAWDATA", 0.2, False, "ZERO", False)


def test_default_settings_make_16_by_16_images(tmp_path):
    # 20 values, window 16: 20 - 16 - 1 + 1 = 4 cases; a straight ramp fills the diagonal.
    path = series_file(tmp_path, range(1, 21))
    d = read_series(path)
    assert d.inputs.shape == (4, 1, 16, 16)
    assert d.n_classes == 2
    # Ramp 1..16, span 15 from 1: band floor((v - 1) * 16 / 15): 0,1,...,14 then 16->15;
    # each column lights its band and the previous one.
    img = d.inputs[0, 0]
    bands = [min(15, (v - 1) * 16 // 15) for v in range(1, 17)]
    assert bands == list(range(15)) + [15]
    for col in range(16):
        lit = {15 - bands[col]} | ({15 - bands[col - 1]} if col else set())
        assert {int(r) for r in np.flatnonzero(img[:, col] == -1.0)} == lit
    assert set(np.unique(d.inputs).tolist()) == {-1.0, 1.0}         # path -1, background +1


# ---------------------------------------------------------------------------------- transforms,
# targets and classes
# Raw series x = 2**k, k = 0 1 3 0 4 -1 5 -2, i.e. 1 2 8 1 16 0.5 32 0.25 (exact in floating point).
# Window 2, shift 1.
RAW_X = [1, 2, 8, 1, 16, 0.5, 32, 0.25]

# transform, target_diff -> (first window, targets); the raw series give 8 - 2 = 6 cases, the
# differenced ones (7 values) 5.
#   RAWDATA, NO DIFF: next value x2..x7.
#   RAWDATA, DIFF: x[i+2] - x[i+1] = 8-2, 1-8, 16-1, 0.5-16, 32-0.5, 0.25-32.
#   RAWLOG: the same on k * ln 2.
#   DIFFDATA: d = 1 6 -7 15 -15.5 31.5 -31.75, targets d2..d6 (TARGET DIFF changes nothing).
#   DIFFLOG: the log differences (1 2 -3 4 -5 6 -7) * ln 2, targets the last five.
TARGETS = {
    ("RAWDATA", False): ([1, 2], [8, 1, 16, 0.5, 32, 0.25]),
    ("RAWDATA", True): ([1, 2], [6, -7, 15, -15.5, 31.5, -31.75]),
    ("RAWLOG", False): ([0, LN2], [3 * LN2, 0, 4 * LN2, -LN2, 5 * LN2, -2 * LN2]),
    ("RAWLOG", True): ([0, LN2], [2 * LN2, -3 * LN2, 4 * LN2, -5 * LN2, 6 * LN2, -7 * LN2]),
    ("DIFFDATA", False): ([1, 6], [-7, 15, -15.5, 31.5, -31.75]),
    ("DIFFDATA", True): ([1, 6], [-7, 15, -15.5, 31.5, -31.75]),
    ("DIFFLOG", False): ([LN2, 2 * LN2], [-3 * LN2, 4 * LN2, -5 * LN2, 6 * LN2, -7 * LN2]),
    ("DIFFLOG", True): ([LN2, 2 * LN2], [-3 * LN2, 4 * LN2, -5 * LN2, 6 * LN2, -7 * LN2]),
}

# (transform, target_diff, class mode) -> (thresholds, classes), worked out from TARGETS:
# ZERO: class 1 when the target is above 0. MEDIAN: the middle of the sorted targets (mean of the
# two middle ones for six). THIRDS: linear interpolation at positions (n-1)/3 and 2(n-1)/3 of the
# sorted targets, i.e. 5/3 and 10/3 for six cases, 4/3 and 8/3 for five.
CLASSES = {
    # sorted 0.25 0.5 1 8 16 32
    ("RAWDATA", False, "ZERO"): ([0], [1, 1, 1, 1, 1, 1]),
    ("RAWDATA", False, "MEDIAN"): ([4.5], [1, 0, 1, 0, 1, 0]),
    ("RAWDATA", False, "THIRDS"): ([0.5 + 0.5 * 2 / 3, 8 + 8 / 3], [1, 1, 2, 0, 2, 0]),
    # sorted -31.75 -15.5 -7 6 15 31.5
    ("RAWDATA", True, "ZERO"): ([0], [1, 0, 1, 0, 1, 0]),
    ("RAWDATA", True, "MEDIAN"): ([-0.5], [1, 0, 1, 0, 1, 0]),
    ("RAWDATA", True, "THIRDS"): ([-15.5 + 8.5 * 2 / 3, 6 + 9 / 3], [1, 1, 2, 0, 2, 0]),
    # sorted (-2 -1 0 3 4 5) ln2; log(1) = 0 exactly, so the 0 target is class 0 for ZERO
    ("RAWLOG", False, "ZERO"): ([0], [1, 0, 1, 0, 1, 0]),
    ("RAWLOG", False, "MEDIAN"): ([1.5 * LN2], [1, 0, 1, 0, 1, 0]),
    ("RAWLOG", False, "THIRDS"): ([(-1 + 2 / 3) * LN2, (3 + 1 / 3) * LN2], [1, 1, 2, 0, 2, 0]),
    # sorted (-7 -5 -3 2 4 6) ln2
    ("RAWLOG", True, "ZERO"): ([0], [1, 0, 1, 0, 1, 0]),
    ("RAWLOG", True, "MEDIAN"): ([-0.5 * LN2], [1, 0, 1, 0, 1, 0]),
    ("RAWLOG", True, "THIRDS"): ([(-5 + 4 / 3) * LN2, (2 + 2 / 3) * LN2], [1, 1, 2, 0, 2, 0]),
    # sorted -31.75 -15.5 -7 15 31.5 (five cases)
    ("DIFFDATA", False, "ZERO"): ([0], [0, 1, 0, 1, 0]),
    ("DIFFDATA", False, "MEDIAN"): ([-7], [0, 1, 0, 1, 0]),
    ("DIFFDATA", False, "THIRDS"): ([-15.5 + 8.5 / 3, -7 + 22 * 2 / 3], [1, 2, 0, 2, 0]),
    # sorted (-7 -5 -3 4 6) ln2
    ("DIFFLOG", False, "ZERO"): ([0], [0, 1, 0, 1, 0]),
    ("DIFFLOG", False, "MEDIAN"): ([-3 * LN2], [0, 1, 0, 1, 0]),
    ("DIFFLOG", False, "THIRDS"): ([(-5 + 2 / 3) * LN2, (-3 + 7 * 2 / 3) * LN2], [1, 2, 0, 2, 0]),
}
for _t in ("DIFFDATA", "DIFFLOG"):              # TARGET DIFF on a differenced series: no change
    for _m in ("ZERO", "MEDIAN", "THIRDS"):
        CLASSES[(_t, True, _m)] = CLASSES[(_t, False, _m)]


@pytest.mark.parametrize("transform", ["RAWDATA", "RAWLOG", "DIFFDATA", "DIFFLOG"])
@pytest.mark.parametrize("target_diff", [False, True])
@pytest.mark.parametrize("mode", ["ZERO", "MEDIAN", "THIRDS"])
def test_every_transform_target_and_class_mode(tmp_path, transform, target_diff, mode):
    path = series_file(tmp_path, RAW_X)
    d = read_series(path, SeriesSettings(window=2, resolution=4, transform=transform,
                                         target_diff=target_diff, class_mode=mode))
    first_window, targets = TARGETS[(transform, target_diff)]
    thresholds, classes = CLASSES[(transform, target_diff, mode)]
    np.testing.assert_allclose(d.series_cases.windows[0], first_window, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(d.targets, targets, rtol=1e-12, atol=1e-12)
    assert d.series.thresholds == pytest.approx(thresholds, rel=1e-12, abs=1e-12)
    np.testing.assert_array_equal(d.classes, classes)
    assert d.classes.dtype == np.int64
    assert d.n_classes == (3 if mode == "THIRDS" else 2)
    assert d.series.n_classes == d.n_classes
    assert d.n_cases == len(targets)
    assert d.series.transform == transform and d.series.class_mode == mode
    # the recorded target kind is the one that was applied
    assert d.series.target_diff == (target_diff and transform.startswith("RAW"))


def test_target_on_a_threshold_goes_to_the_lower_class(tmp_path):
    # DIFFDATA of 0 1 1 3 2 2: 1 0 2 -1 0; window 2 -> targets 2 -1 0: ZERO classes 1 0 0.
    path = series_file(tmp_path, [0, 1, 1, 3, 2, 2])
    d = read_series(path, SeriesSettings(window=2, resolution=2, transform="DIFFDATA"))
    np.testing.assert_array_equal(d.targets, [2, -1, 0])
    np.testing.assert_array_equal(d.classes, [1, 0, 0])


def test_median_differs_from_zero(tmp_path):
    # targets 5 6 7 9: ZERO puts all in class 1; MEDIAN = 6.5 splits them 0 0 1 1.
    path = series_file(tmp_path, [1, 2, 5, 6, 7, 9])
    zero = read_series(path, SeriesSettings(window=2, resolution=2))
    median = read_series(path, SeriesSettings(window=2, resolution=2, class_mode="MEDIAN"))
    np.testing.assert_array_equal(zero.classes, [1, 1, 1, 1])
    assert median.series.thresholds == (6.5,)
    np.testing.assert_array_equal(median.classes, [0, 0, 1, 1])


# ---------------------------------------------------------------------------------- file layout
def test_shift_above_one(tmp_path):
    path = series_file(tmp_path, range(1, 11))              # 1..10
    # SHIFT 3: starts 0 3 6 -> windows 1-3, 4-6, 7-9, targets 4 7 10
    d = read_series(path, SeriesSettings(window=3, resolution=3, shift=3))
    np.testing.assert_array_equal(d.series_cases.windows, [[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    np.testing.assert_array_equal(d.targets, [4, 7, 10])
    # SHIFT 4: starts 0 4 (a window at 8 would need an 11th value) -> targets 4 8; 9 and 10 unused
    d = read_series(path, SeriesSettings(window=3, resolution=3, shift=4))
    np.testing.assert_array_equal(d.series_cases.windows, [[1, 2, 3], [5, 6, 7]])
    np.testing.assert_array_equal(d.targets, [4, 8])
    # a ramp of 3 on a span of 2 (q = 2): bands 0, 1 (1.5), 2 (3->2)
    np.testing.assert_array_equal(d.inputs, pictures(["..# ..#", ".## .##", "##. ##."]))


def test_shift_with_differencing_and_target_diff(tmp_path):
    # RAWDATA with TARGET DIFF, window 2, shift 2 over 1 4 9 16 25 36 49:
    # starts 0 2 4 -> windows [1 4] [9 16] [25 36], targets 9-4, 25-16, 49-36.
    path = series_file(tmp_path, [1, 4, 9, 16, 25, 36, 49])
    d = read_series(path, SeriesSettings(window=2, resolution=2, shift=2, target_diff=True))
    np.testing.assert_array_equal(d.series_cases.windows, [[1, 4], [9, 16], [25, 36]])
    np.testing.assert_array_equal(d.targets, [5, 9, 13])
    # DIFFDATA, shift 2: 3 5 7 9 11 13 -> windows [3 5] [7 9], targets 7 11
    d = read_series(path, SeriesSettings(window=2, resolution=2, shift=2, transform="DIFFDATA"))
    np.testing.assert_array_equal(d.series_cases.windows, [[3, 5], [7, 9]])
    np.testing.assert_array_equal(d.targets, [7, 11])


def test_header_line_and_column(tmp_path):
    text = ("Date,Open,Close\n"
            "1/2/2000,10,1\n"
            "1/3/2000,11,2\n"
            "1/4/2000,12,4\n"
            "1/5/2000,13,3\n")
    path = write(tmp_path, text, "prices.csv")
    d = read_series(path, SeriesSettings(column=3, header=True, window=2, resolution=2))
    np.testing.assert_array_equal(d.series_cases.windows, [[1, 2], [2, 4]])
    np.testing.assert_array_equal(d.targets, [4, 3])
    np.testing.assert_array_equal(d.series_cases.lines, [4, 5])   # file lines of the targets
    d = read_series(path, SeriesSettings(column=2, header=True, window=2, resolution=2))
    np.testing.assert_array_equal(d.targets, [12, 13])


def test_without_header_setting_a_header_line_is_an_error(tmp_path):
    path = write(tmp_path, "Date,Close\n1/2/2000,1\n1/3/2000,2\n1/4/2000,3\n", "prices.csv")
    with pytest.raises(ConvnetError) as e:
        read_series(path, SeriesSettings(column=2, window=2))
    assert e.value.file == path and e.value.line == 1
    assert "SERIES HEADER" in str(e.value) and "'Close'" in str(e.value)
    assert path in str(e.value)


def test_comma_and_space_mixed_file(tmp_path):
    text = ("1,  10 ,x\r\n"
            "2\t20,y\r\n"
            "\r\n"                      # blank lines are skipped
            "   \n"
            "3 ,30 z\n"
            " 4, 40,\tw\n"
            "5,50,\n")                  # a trailing comma leaves an empty last field
    path = write(tmp_path, text, "mixed.txt")
    d = read_series(path, SeriesSettings(column=2, window=2, resolution=2))
    np.testing.assert_array_equal(d.series_cases.windows, [[10, 20], [20, 30], [30, 40]])
    np.testing.assert_array_equal(d.targets, [30, 40, 50])
    np.testing.assert_array_equal(d.series_cases.lines, [5, 6, 7])
    d = read_series(path, SeriesSettings(column=1, window=2, resolution=2))
    np.testing.assert_array_equal(d.targets, [3, 4, 5])


def test_field_splitting():
    assert split_fields("1, 2,3 4") == ["1", "2", "3", "4"]
    assert split_fields("1,,3") == ["1", "", "3"]
    assert split_fields("a\t b , c") == ["a", "b", "c"]
    assert split_fields("   ") == []


def test_byte_order_mark_is_ignored(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeff1\n2\n3\n".encode("utf-8"))
    d = read_series(str(path), SeriesSettings(window=2, resolution=2))
    np.testing.assert_array_equal(d.targets, [3])


# ---------------------------------------------------------------------------------- KEEP CASES
def test_keep_cases_recomputes_scale_and_thresholds(tmp_path):
    path = series_file(tmp_path, SCALE_VALUES)
    d = read_series(path, SeriesSettings(window=2, resolution=5, frac_full=0.0,
                                         class_mode="MEDIAN"))
    # all six: q = 8, median of 13 17 25 24 22 23 = 22.5
    assert d.series.q == 8.0 and d.series.thresholds == (22.5,)
    np.testing.assert_array_equal(d.classes, [0, 0, 1, 1, 0, 1])
    k = d.keep_cases(1, 3)
    # kept: ranges 1 2 4 -> q = 4 (FRAC FULL 0); targets 13 17 25 -> median 17
    assert k.series.q == 4.0 and k.series.thresholds == (17.0,)
    assert k.series.n_cases == 3
    np.testing.assert_array_equal(k.classes, [0, 0, 1])
    np.testing.assert_array_equal(k.inputs, pictures([".. .. .#",      # bands as for q = 4 above
                                                      ".# .# .#",
                                                      ".# .# .#",
                                                      "## ## .#",
                                                      ".. .. ##"]))
    np.testing.assert_array_equal(k.targets, [13, 17, 25])
    assert d.series.q == 8.0                                  # the original is unchanged


def test_keep_cases_edges_on_series(tmp_path):
    path = series_file(tmp_path, SCALE_VALUES)
    d = read_series(path, SeriesSettings(window=2, resolution=5, frac_full=0.0))
    first = d.keep_cases(1, 1)
    last = d.keep_cases(6, 6)
    assert first.n_cases == last.n_cases == 1
    np.testing.assert_array_equal(first.series_cases.windows, [[10, 11]])
    np.testing.assert_array_equal(last.series_cases.windows, [[24, 22]])
    assert first.series.q == 1.0 and last.series.q == 2.0
    np.testing.assert_array_equal(last.targets, [23])
    whole = d.keep_cases(1, 6)
    np.testing.assert_array_equal(whole.inputs, d.inputs)
    with pytest.raises(ConvnetError, match="1..6"):
        d.keep_cases(5, 7)


def test_test_series_uses_the_training_scale_and_thresholds(tmp_path):
    train = read_series(series_file(tmp_path, SCALE_VALUES, "train.txt"),
                        SeriesSettings(window=2, resolution=5, frac_full=0.0, class_mode="MEDIAN"))
    info = train.series                                    # q = 8, threshold 22.5
    test_path = series_file(tmp_path, [0, 2, 1, 30, 25], "test.txt")
    settings = SeriesSettings(window=2, resolution=5, frac_full=0.0, class_mode="MEDIAN")
    d = read_series(test_path, settings, scaling=info)
    # windows [0 2] [2 1] [1 30], targets 1 30 25; with q = 8:
    # [0 2] from -3: bands 1 (1.875), 3 (3.125); [2 1] from -2.5: 2 (2.8125), 2 (2.1875);
    # [1 30] range 29 > 8: full height. Classes at 22.5: 0 1 1 (its own median 25 gives 0 1 0).
    assert d.series is info
    np.testing.assert_array_equal(d.classes, [0, 1, 1])
    np.testing.assert_array_equal(d.inputs, pictures([".. .. .#",
                                                      ".# .. .#",
                                                      ".# ## .#",
                                                      "## .. .#",
                                                      ".. .. ##"]))
    own = read_series(test_path, settings)
    np.testing.assert_array_equal(own.classes, [0, 1, 0])
    assert own.series.q == 29.0
    # KEEP CASES on a test series keeps the training values
    k = d.keep_cases(2, 3)
    assert k.series is info
    np.testing.assert_array_equal(k.classes, [1, 1])
    np.testing.assert_array_equal(k.inputs, d.inputs[1:])


def test_test_series_with_other_settings_is_an_error(tmp_path):
    train = read_series(series_file(tmp_path, SCALE_VALUES, "train.txt"),
                        SeriesSettings(window=2, resolution=5))
    path = series_file(tmp_path, SCALE_VALUES, "test.txt")
    with pytest.raises(ConvnetError) as e:
        read_series(path, SeriesSettings(window=2, resolution=5, class_mode="THIRDS"),
                    scaling=train.series)
    assert path in str(e.value) and "CLASS ZERO" in str(e.value)
    with pytest.raises(ConvnetError, match="SERIES RAWDATA"):
        read_series(path, SeriesSettings(window=2, resolution=5, transform="DIFFDATA"),
                    scaling=train.series)


def test_series_info_round_trips_through_a_plain_dict(tmp_path):
    d = read_series(series_file(tmp_path, RAW_X),
                    SeriesSettings(window=2, resolution=4, transform="RAWLOG", target_diff=True,
                                   class_mode="THIRDS"))
    plain = d.series.to_dict()
    assert all(isinstance(v, (int, float, str)) and not isinstance(v, bool)
               for v in plain.values())
    back = SeriesInfo.from_dict(plain)
    assert back == d.series
    assert back.thresholds == d.series.thresholds and back.q == d.series.q
    assert plain["target"] == "DIFF" and plain["n_thresholds"] == 2


def test_series_info_in_field_by_field_form(tmp_path):
    import dataclasses
    import json
    d = read_series(series_file(tmp_path, RAW_X),
                    SeriesSettings(window=2, resolution=4, class_mode="THIRDS"))
    fields = json.loads(json.dumps(dataclasses.asdict(d.series)))     # thresholds become a list
    assert SeriesInfo.from_dict(fields) == d.series
    # a test series accepts the dict form of a saved model's series information
    again = read_series(series_file(tmp_path, RAW_X, "test.txt"),
                        SeriesSettings(window=2, resolution=4, class_mode="THIRDS"),
                        scaling=d.series.to_dict())
    assert again.series == d.series and not again.series_cases.own_scaling
    np.testing.assert_array_equal(again.classes, d.classes)
    fields["thresholds"] = "0.5"
    with pytest.raises(ConvnetError, match="bad 'thresholds'"):
        SeriesInfo.from_dict(fields)
    with pytest.raises(ConvnetError, match="not a table"):
        SeriesInfo.from_dict([1, 2])


@pytest.mark.parametrize("change, words", [
    ({"q": None}, "no 'q'"),
    ({"q": "abc"}, "bad 'q'"),
    ({"version": 99}, "version 99"),
    ({"class_mode": "FOURTHS"}, "unknown class mode"),
    ({"n_thresholds": 3}, "3 thresholds"),
    ({"threshold_1": None}, "no 'threshold_1'"),
])
def test_series_info_from_a_bad_dict(change, words):
    info = SeriesInfo("RAWDATA", False, "ZERO", 16, 16, 0.2, 1.5, (0.0,), 10)
    plain = info.to_dict()
    for key, value in change.items():
        if value is None:
            del plain[key]
        else:
            plain[key] = value
    with pytest.raises(ConvnetError, match=words):
        SeriesInfo.from_dict(plain)


# ---------------------------------------------------------------------------------- errors
def test_missing_series_file(tmp_path):
    path = str(tmp_path / "nothere.csv")
    with pytest.raises(ConvnetError) as e:
        read_series(path)
    assert path in str(e.value) and "not found" in str(e.value)


@pytest.mark.parametrize("text, header", [("", False), ("\n  \n", False), ("Close\n", True)])
def test_empty_series(tmp_path, text, header):
    path = write(tmp_path, text)
    with pytest.raises(ConvnetError) as e:
        read_series(path, SeriesSettings(header=header))
    assert path in str(e.value) and "no values" in str(e.value)


def test_non_numeric_field_names_the_line(tmp_path):
    path = write(tmp_path, "1,5\n2,6\n3,abc\n4,8\n")
    with pytest.raises(ConvnetError) as e:
        read_series(path, SeriesSettings(column=2, window=2))
    assert (e.value.file, e.value.line) == (path, 3)
    assert str(e.value).startswith(f"{path}:3: ")
    assert "non-numeric value 'abc' in column 2" in str(e.value)


@pytest.mark.parametrize("text, words", [("1\n2\nnan\n4\n", "'nan'"), ("1\n2\ninf\n", "'inf'"),
                                         ("1,2\n3,,4\n", "empty field in column 2")])
def test_not_a_finite_number_is_an_error(tmp_path, text, words):
    path = write(tmp_path, text)
    with pytest.raises(ConvnetError) as e:
        read_series(path, SeriesSettings(column=2 if "," in text else 1, window=2))
    assert e.value.file == path and words in str(e.value)


def test_too_few_fields_names_the_line(tmp_path):
    path = write(tmp_path, "1 5\n2 6\n3\n")
    with pytest.raises(ConvnetError) as e:
        read_series(path, SeriesSettings(column=2, window=2))
    assert (e.value.file, e.value.line) == (path, 3)
    assert "1 field but SERIES COLUMN is 2" in str(e.value)


@pytest.mark.parametrize("transform", ["RAWLOG", "DIFFLOG"])
@pytest.mark.parametrize("bad", ["0", "-2.5"])
def test_log_of_a_non_positive_value(tmp_path, transform, bad):
    path = write(tmp_path, f"Close\n1\n2\n3\n{bad}\n5\n")
    with pytest.raises(ConvnetError) as e:
        read_series(path, SeriesSettings(header=True, window=2, transform=transform))
    assert (e.value.file, e.value.line) == (path, 5)
    assert path in str(e.value) and f"log of {bad}" in str(e.value)


def test_log_of_a_non_positive_value_is_fine_without_log(tmp_path):
    path = series_file(tmp_path, [1, 0, -3, 2])
    d = read_series(path, SeriesSettings(window=2, resolution=2))
    np.testing.assert_array_equal(d.targets, [-3, 2])


@pytest.mark.parametrize("values, transform, window", [
    ([1, 2, 3], "RAWDATA", 3),          # a window of 3 needs 4 values
    ([1, 2, 3, 4], "DIFFDATA", 3),      # differencing leaves 3
    ([1, 2, 3, 4], "RAWDATA", 16),
])
def test_window_longer_than_the_series(tmp_path, values, transform, window):
    path = series_file(tmp_path, values)
    with pytest.raises(ConvnetError) as e:
        read_series(path, SeriesSettings(window=window, transform=transform))
    assert path in str(e.value) and f"SERIES WINDOW = {window}" in str(e.value)


def test_shortest_series_that_fits_gives_one_case(tmp_path):
    path = series_file(tmp_path, [1, 2, 3, 4])
    d = read_series(path, SeriesSettings(window=3, resolution=2, transform="RAWDATA"))
    assert d.n_cases == 1


@pytest.mark.parametrize("field, value, words", [
    ("window", 1, "SERIES WINDOW"), ("resolution", 0, "SERIES RESOLUTION"),
    ("shift", 0, "SERIES SHIFT"), ("column", 0, "SERIES COLUMN"),
    ("frac_full", 1.5, "SERIES FRAC FULL"), ("transform", "LOG", "transform"),
    ("class_mode", "HALVES", "SERIES CLASS"),
])
def test_bad_settings(tmp_path, field, value, words):
    path = series_file(tmp_path, range(20))
    with pytest.raises(ConvnetError, match=words):
        read_series(path, SeriesSettings(**{field: value}))


def test_folder_instead_of_a_file(tmp_path):
    with pytest.raises(ConvnetError) as e:
        read_series(str(tmp_path))
    assert str(tmp_path) in str(e.value)
