"""V-JEPA 2-AC (facebook/vjepa2-vitg-fpc64-256 with the vjepa2-ac-vitg predictor): a video encoder, its
masked predictor, an action-conditioned predictor over the KV engine, a scorer and the CEM planner
(docs/models/vjepa2_ac.md). models/vjepa2_ac.walk imports this package as `vjepa`."""

from wgc.models.vjepa2_ac.ac_predictor import ActionConditionedPredictor as ActionConditionedPredictor
from wgc.models.vjepa2_ac.encoder import Encoder as Encoder
from wgc.models.vjepa2_ac.encoder import MaskedPredictor as MaskedPredictor
from wgc.models.vjepa2_ac.planner import Planner as Planner
from wgc.models.vjepa2_ac.scorer import Scorer as Scorer
