"""Which values ctrain hides when it prints an environment."""

from __future__ import annotations

import pytest

from ctrain.util.secrets import HIDDEN, is_secret_name, masked


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("WANDB_API_KEY", "abc123", HIDDEN),
        ("HF_TOKEN", "hf_xyz", HIDDEN),
        ("AWS_SECRET_ACCESS_KEY", "s3cr3t", HIDDEN),
        ("MLFLOW_TRACKING_PASSWORD", "pw", HIDDEN),
        ("PGPASSWD", "pw", HIDDEN),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/home/u/key.json", HIDDEN),
        ("ssh_passphrase", "words", HIDDEN),  # any case
        ("HF_TOKEN", "", ""),  # empty: nothing to hide
        ("HTTPS_PROXY", "http://alice:pa55@proxy:3128", f"http://alice:{HIDDEN}@proxy:3128"),
        ("https_proxy", "http://proxy:3128", "http://proxy:3128"),  # no password
        ("ALL_PROXY", "socks5://bob@proxy:1080", "socks5://bob@proxy:1080"),  # user only
        ("PIP_INDEX_URL", "https://u:p@pypi.site/simple", f"https://u:{HIDDEN}@pypi.site/simple"),
        ("NO_PROXY", "localhost,127.0.0.1", "localhost,127.0.0.1"),
        ("TF_CONFIG", '{"cluster": {"worker": ["a:1"]}}', '{"cluster": {"worker": ["a:1"]}}'),
        ("MSG", "see https://host/a:b@c", "see https://host/a:b@c"),  # a path, not userinfo
    ],
)
def test_masked(name: str, value: str, shown: str) -> None:
    assert masked(name, value) == shown


def test_is_secret_name() -> None:
    assert [n for n in ("SLURM_JOB_ID", "OMP_NUM_THREADS", "API_KEY") if is_secret_name(n)] == [
        "API_KEY"
    ]
