"""A hand-written list of (specific, general) English word pairs: the audit's specificity proxy.

Each pair is a word and a more general word that names a class it belongs to (a hypernym in
WordNet's sense: a poodle *is a* dog, a sonnet *is a* poem, crimson *is a* red). The list was written
for the norm audit and checked by hand against these rules:

* both words are single lower-case English words that ``wordfreq`` knows (Zipf > 0);
* the relation is "is a kind of" (no part-of, no "associated with"), read in the common sense of the
  word where it has several (``apple`` the fruit, ``jet`` the aircraft);
* every word occurs in one pair only, so the pairs are independent units for a bootstrap or sign test
  (no general word is shared by several specific ones);
* the specific word is the *shorter* one in 52 of the 120 pairs (``oak``/``tree``, ``ant``/``insect``) and
  as long in 12, so that length does not line up with specificity; the audit still adjusts for length
  (characters and tokens), since a mean-pooled norm tracks it;
* topics are spread: animals, plants, food, objects, people, places, events, abstractions.

Specific words are on the whole rarer than their general words (``wordfreq``: the specific word is the
rarer in 82 of the 120 pairs), so frequency and specificity are confounded; the audit reports the comparison
adjusted for length alone and for length and frequency.
"""

from __future__ import annotations

__all__ = ["HYPERNYM_PAIRS"]

HYPERNYM_PAIRS: tuple[tuple[str, str], ...] = (
    # animals
    ("poodle", "dog"),
    ("sparrow", "bird"),
    ("salmon", "fish"),
    ("cobra", "snake"),
    ("whale", "mammal"),
    ("frog", "amphibian"),
    ("ant", "insect"),
    ("wolf", "canine"),
    ("stallion", "horse"),
    ("lion", "cat"),
    ("crocodile", "reptile"),
    ("spider", "arachnid"),
    ("oyster", "shellfish"),
    # plants and fungi
    ("oak", "tree"),
    ("tulip", "flower"),
    ("pine", "conifer"),
    ("bamboo", "grass"),
    ("fern", "plant"),
    ("mushroom", "fungus"),
    ("basil", "herb"),
    # food and drink
    ("apple", "fruit"),
    ("carrot", "vegetable"),
    ("rice", "grain"),
    ("wine", "drink"),
    ("cheese", "food"),
    ("lemon", "citrus"),
    ("strawberry", "berry"),
    ("walnut", "nut"),
    ("baguette", "bread"),
    ("cupcake", "cake"),
    ("chowder", "soup"),
    ("spaghetti", "pasta"),
    ("lager", "beer"),
    ("espresso", "coffee"),
    ("honey", "sweetener"),
    ("pepper", "spice"),
    ("salt", "mineral"),
    # objects and materials
    ("hammer", "tool"),
    ("truck", "vehicle"),
    ("sedan", "car"),
    ("canoe", "boat"),
    ("jet", "aircraft"),
    ("chair", "furniture"),
    ("spoon", "utensil"),
    ("dagger", "knife"),
    ("rifle", "gun"),
    ("sword", "weapon"),
    ("shirt", "clothing"),
    ("boot", "footwear"),
    ("violin", "instrument"),
    ("drum", "percussion"),
    ("laptop", "computer"),
    ("smartphone", "phone"),
    ("copper", "metal"),
    ("steel", "alloy"),
    ("granite", "rock"),
    ("marble", "stone"),
    ("silk", "fabric"),
    ("denim", "cloth"),
    ("diamond", "gem"),
    ("oxygen", "element"),
    ("aspirin", "drug"),
    ("penicillin", "antibiotic"),
    ("insulin", "hormone"),
    # buildings and places
    ("cottage", "house"),
    ("castle", "building"),
    ("cathedral", "church"),
    ("kitchen", "room"),
    ("hospital", "institution"),
    ("paris", "city"),
    ("france", "country"),
    ("africa", "continent"),
    ("atlantic", "ocean"),
    ("nile", "river"),
    ("volcano", "mountain"),
    ("brook", "stream"),
    # people
    ("surgeon", "doctor"),
    ("carpenter", "craftsman"),
    ("violinist", "musician"),
    ("novelist", "writer"),
    ("painter", "artist"),
    ("senator", "politician"),
    ("king", "ruler"),
    ("daughter", "child"),
    ("uncle", "relative"),
    # body and health
    ("heart", "organ"),
    ("femur", "bone"),
    ("thumb", "finger"),
    ("molar", "tooth"),
    ("melanoma", "cancer"),
    ("influenza", "disease"),
    ("fever", "symptom"),
    # culture and communication
    ("sonnet", "poem"),
    ("novel", "book"),
    ("newspaper", "publication"),
    ("jazz", "music"),
    ("chess", "game"),
    ("soccer", "sport"),
    ("waltz", "dance"),
    ("sitcom", "comedy"),
    ("english", "language"),
    ("email", "message"),
    ("linux", "software"),
    ("dollar", "currency"),
    # nature, time and abstractions
    ("hurricane", "storm"),
    ("drizzle", "rain"),
    ("snow", "precipitation"),
    ("earthquake", "disaster"),
    ("crimson", "red"),
    ("blue", "color"),
    ("circle", "shape"),
    ("triangle", "polygon"),
    ("seven", "number"),
    ("monday", "day"),
    ("january", "month"),
    ("summer", "season"),
    ("anger", "emotion"),
    ("joy", "feeling"),
    ("murder", "crime"),
    ("war", "conflict"),
)
"""``(specific, general)`` pairs, each word in one pair only; see the module docstring for the rules."""
