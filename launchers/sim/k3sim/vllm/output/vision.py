"""Image inputs: data/file/http URLs decoded with Pillow (imported lazily: it costs RSS)."""
from __future__ import annotations

import base64
import binascii
import hashlib
import io
import math
import os
import urllib.request
from collections import Counter
from dataclasses import dataclass

from k3sim.vllm.errors import RequestError

PALETTE = {
    "black": (0, 0, 0), "white": (255, 255, 255), "gray": (128, 128, 128), "red": (220, 20, 20),
    "green": (30, 160, 30), "blue": (30, 60, 220), "yellow": (240, 220, 30), "orange": (255, 140, 0),
    "purple": (128, 0, 128), "pink": (255, 150, 200), "brown": (140, 80, 20), "cyan": (0, 200, 220),
}


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    colour: str
    digest: str

    @property
    def num_tokens(self) -> int:
        """MoonViT: 14 px patches merged 2x2, so one placeholder token per 28x28 area."""
        return max(1, math.ceil(self.width / 28) * math.ceil(self.height / 28))


def _load_bytes(url: str, allowed_local: str) -> bytes:
    if url.startswith("data:"):
        if "," not in url:
            raise RequestError(f"Invalid data URL {url[:40]}...: missing ',' separator.")
        header, data = url[5:].split(",", 1)
        if not header.endswith(";base64"):
            raise RequestError("Only base64 data URLs are supported for now.")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise RequestError(f"Invalid base64 data in image URL: {exc}") from None
    if url.startswith("file:"):
        if not allowed_local:
            raise RequestError("Cannot load local files without `--allowed-local-media-path`.")
        path = os.path.realpath(urllib.request.url2pathname(url[5:].removeprefix("//")))
        root = os.path.realpath(allowed_local)
        if os.path.commonpath([path, root]) != root:
            raise RequestError(f"The file path {path} must be a subpath of "
                               f"`--allowed-local-media-path {allowed_local}`.")
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise RequestError(str(exc)) from None
    if url.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(url, timeout=float(os.environ.get("VLLM_IMAGE_FETCH_TIMEOUT", "5"))) as resp:
                return resp.read()
        except OSError as exc:
            raise RequestError(f"Failed to fetch image from {url}: {exc}") from None
    raise RequestError("The URL must be either a HTTP, data or file URL.")


def _colour(img) -> str:
    small = img.convert("RGB")
    small.thumbnail((32, 32))
    counts: Counter[str] = Counter()
    for r, g, b in small.getdata():
        name = min(PALETTE, key=lambda n: sum((c - v) ** 2 for c, v in zip(PALETTE[n], (r, g, b))))
        counts[name] += 1
    return counts.most_common(1)[0][0]


def load(url: str, allowed_local: str) -> Image:
    raw = _load_bytes(url, allowed_local)
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    try:
        with PILImage.open(io.BytesIO(raw)) as img:
            img.load()
            return Image(img.width, img.height, _colour(img), hashlib.sha256(raw).hexdigest())
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise RequestError(f"Failed to load image: {exc}") from None
