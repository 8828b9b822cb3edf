"""A pure-Python reference of Hugging Face's slow AlbertTokenizer (the one the checkpoint was
trained with), for odeserve's config `tokenizer.normalization` and its tests:

  1. preprocess_text: remove_space (strip, join whitespace runs with one space); "``" and "''"
     become '"'; unless keep_accents, NFKD and combining marks dropped; do_lower_case: lower().
  2. SentencePiece pieces of the result.
  3. A piece ending in a digit and a comma ("▁1998,") is encoded again without the comma and
     its word marker; the comma follows as its own piece.
  4. Piece -> id, then [CLS] ids [SEP]; truncation keeps the first max_length - 2 pieces.

Not mirrored: Hugging Face's splitting of special-token strings (a literal "[MASK]" in the input
text) before tokenization; odeserve encodes such text as ordinary text.
"""
import unicodedata
from typing import TYPE_CHECKING, List, Sequence, Tuple

if TYPE_CHECKING:  # torch is imported only where batch() needs it
    import torch

SPIECE_UNDERLINE = "\u2581"


def preprocess_text(text: str, do_lower_case: bool = True, keep_accents: bool = False,
                    remove_space: bool = True) -> str:
    if remove_space:
        text = " ".join(text.strip().split())
    text = text.replace("``", '"').replace("''", '"')
    if not keep_accents:
        text = unicodedata.normalize("NFKD", text)
        text = "".join(c for c in text if not unicodedata.combining(c))
    if do_lower_case:
        text = text.lower()
    return text


def split_digit_comma(sp, pieces: Sequence[str]) -> List[str]:
    """Hugging Face AlbertTokenizer._tokenize's re-split of pieces like "▁1998,"."""
    out: List[str] = []
    for piece in pieces:
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            cur = list(sp.EncodeAsPieces(piece[:-1].replace(SPIECE_UNDERLINE, "")))
            if cur and piece[0] != SPIECE_UNDERLINE and cur[0][0] == SPIECE_UNDERLINE:
                if len(cur[0]) == 1:
                    cur = cur[1:]
                else:
                    cur[0] = cur[0][1:]
            cur.append(piece[-1])
            out.extend(cur)
        else:
            out.append(piece)
    return out


class AlbertTokenizerReference:
    def __init__(self, model_file: str, do_lower_case: bool = True, keep_accents: bool = False,
                 remove_space: bool = True):
        import sentencepiece as spm
        self.sp = spm.SentencePieceProcessor()
        self.sp.Load(model_file)
        self.do_lower_case, self.keep_accents, self.remove_space = do_lower_case, keep_accents, remove_space
        self.cls_id = self.sp.PieceToId("[CLS]")
        self.sep_id = self.sp.PieceToId("[SEP]")
        self.pad_id = max(self.sp.pad_id(), 0)

    @classmethod
    def from_options(cls, model_file: str, options: dict) -> "AlbertTokenizerReference":
        return cls(model_file, do_lower_case=options.get("do_lower_case", True),
                   keep_accents=options.get("keep_accents", False),
                   remove_space=options.get("remove_space", True))

    def preprocess(self, text: str) -> str:
        return preprocess_text(text, self.do_lower_case, self.keep_accents, self.remove_space)

    def tokenize(self, text: str) -> List[str]:
        """The pieces, without [CLS]/[SEP]."""
        return split_digit_comma(self.sp, self.sp.encode(self.preprocess(text), out_type=str))

    def encode(self, text: str, max_length: int) -> List[int]:
        """[CLS] ids [SEP], at most max_length ids (the first max_length - 2 pieces)."""
        if max_length < 2:
            raise ValueError("max_length %d leaves no room for [CLS] and [SEP]" % max_length)
        ids = [self.sp.PieceToId(p) for p in self.tokenize(text)]
        return [self.cls_id] + ids[:max_length - 2] + [self.sep_id]

    def batch(self, texts: Sequence[str], max_length: int) -> Tuple["torch.Tensor", "torch.Tensor"]:
        """-> (x int64 [B, T], mask float32 [B, T]), padded with the pad id."""
        import torch
        rows = [self.encode(t, max_length) for t in texts]
        T = max(len(r) for r in rows)
        x = torch.full((len(rows), T), self.pad_id, dtype=torch.int64)
        mask = torch.zeros(len(rows), T)
        for i, r in enumerate(rows):
            x[i, :len(r)] = torch.tensor(r, dtype=torch.int64)
            mask[i, :len(r)] = 1.0
        return x, mask
