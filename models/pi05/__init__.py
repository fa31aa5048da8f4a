"""π0.5 (lerobot/pi05_base): camera images, a task and the robot state in, an action chunk out.
`vit` is PaliGemma's SigLIP tower (vision.py); `llm` the Gemma-2B prefix and the Gemma-300M action
expert over the KV engine (llm.py); the policy route reads its shapes through `policy_shape`."""

from wgc.models.pi05.config import Pi05Config as Pi05Config
from wgc.models.pi05.frontend import policy_shape as policy_shape  # the policy route's hook
from wgc.models.pi05.llm import PaliGemmaWithExpert as PaliGemmaWithExpert
from wgc.models.pi05.stats import Stats as Stats
from wgc.models.pi05.vision import SiglipEncoder as SiglipEncoder
