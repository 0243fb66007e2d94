"""The English training corpus of the zoo's tokenizers, and :func:`corpus_lines`."""

from __future__ import annotations

# Plain English written for this zoo. The tokenizers are trained on it, so words of the test
# prompts must be frequent enough to become single tokens (" Berlin", " Wolfgang", " future").
_CORPUS = """\
The future of AI is a question that people ask at dinner tables, in classrooms and in the \
offices of large companies. Some say the future of AI is bright, others say it is uncertain, \
and most admit that nobody really knows. What is clear is that small models can be tested \
quickly, and that careful testing makes every system more reliable.

My name is Wolfgang and I live in Berlin. I work as an engineer at a small company near the \
river, and every morning I ride my bicycle along the water to the office. Berlin is a large \
city with many parks, old buildings, new buildings, museums, markets and quiet streets. When \
friends visit, I show them the old wall, the tower on the square and the long green park where \
children play football in the summer.

Where do I live? I live in Berlin, a city in Germany. Where does my sister live? She lives in \
Paris, and my brother lives in London. Our parents live in a small town in the mountains, where \
the winters are long and cold and the summers are short and warm. We meet there every year in \
December, when the snow covers the roofs and the lakes turn to ice.

Machine learning models learn patterns from data. A language model reads a sequence of tokens \
and predicts the next token, one step at a time. A classifier reads a sentence and decides \
whether it is positive, negative or neutral. A question answering model reads a question and a \
passage of text and points to the answer inside the passage. A named entity model marks the \
names of people, places and organizations in a sentence.

The weather today is cold and grey, but the forecast says that the sun will return tomorrow. \
In the spring the trees in the park turn green again, the birds come back from the south and \
people sit outside in the cafes. In the autumn the leaves turn red, yellow and brown, and the \
wind carries them across the streets and into the river.

A good test is small, fast and honest. It checks one thing, it fails for one reason, and when \
it fails it tells you what went wrong. Engineers write tests before they change the code, run \
them after every change, and keep them running on every machine. A compiler turns a program \
into instructions for the hardware; a good compiler makes the program faster without changing \
what it computes.

I love reading books about history, science and travel. My favourite book tells the story of a \
ship that sailed around the world, through storms and calm seas, to islands that no map had \
shown before. The captain kept a journal, and every evening he wrote down the wind, the stars, \
the fish they caught and the songs the sailors sang.

The market opens early on Saturday morning. Farmers bring apples, pears, potatoes, carrots, \
bread, cheese, eggs and honey, and the whole square smells of coffee and fresh bread. I buy \
vegetables for the week, flowers for the kitchen table and a warm pretzel for the walk home.

This movie was wonderful, and I would watch it again. This movie was terrible, and I want my \
money back. The food was fine, the service was slow, and the room was quiet. The concert was \
amazing, the music was loud and the crowd was happy. The book was boring and far too long.

Hello, how are you? I am fine, thank you, and you? Can you help me with a question? Of course, \
what would you like to know? Please tell me the way to the station. Go straight ahead, turn \
left at the bank, and the station is on your right, next to the old hotel.

Numbers and dates appear in every kind of text: 1, 2, 3, 10, 20, 100, 2024, the first of May, \
the 3rd of October, half past seven, twenty minutes, three hours, forty years. Symbols appear \
too: the price is $5.99, the score was 3:1, the file is called model.safetensors, and the \
address is example@example.com.

Every city has its own rhythm. In the early morning the bakers light their ovens, the buses \
start their routes and the first trains leave the central station. By noon the streets are \
full of workers looking for lunch, tourists looking at maps and students hurrying between \
lectures. In the evening the lights come on in the windows, the restaurants fill up and the \
theatres open their doors. Late at night only the taxis, the cleaners and a few musicians are \
still awake.

The history of computing is a history of people who wanted to calculate faster. Early \
machines used gears and levers, later machines used relays and vacuum tubes, and modern \
machines use billions of tiny transistors printed on silicon. Each generation was smaller, \
cheaper and more powerful than the last. Today a phone in your pocket is stronger than the \
computers that guided the first rockets to the moon.

Learning a new language takes patience. At first every sentence is a puzzle: you search for \
words, you forget the grammar, and you speak slowly. After a few months you begin to \
understand the radio, to read the newspaper and to dream in the new language. Teachers say \
that the secret is to practise a little every day, to listen carefully and to never be afraid \
of making mistakes.

Our garden is small but full of life. There are roses along the fence, tomatoes and beans in \
the beds, and an old cherry tree that gives shade in the afternoon. Bees visit the flowers, \
a family of sparrows lives under the roof, and sometimes a hedgehog crosses the lawn at \
night. My grandmother planted the cherry tree when she was young, and it still carries fruit \
every July.

Scientists study the ocean, the forests, the deserts and the ice at the poles. They measure \
the temperature of the water, count the animals, collect samples of soil and record the \
movement of glaciers. Their reports help governments plan for floods, storms and dry seasons, \
and they remind everyone that the health of the planet depends on the choices we make today.

The team met on Monday to plan the next release. Anna will update the documentation, Peter \
will fix the slow tests, and Maria will review the new features. Everyone agreed to keep the \
changes small, to measure the performance before and after, and to write down every decision \
so that new members can understand why the project looks the way it does.

A recipe for a simple soup: cut two onions, three carrots and a few potatoes into small \
pieces. Warm some oil in a large pot, add the onions and cook them until they are soft. Add \
the carrots, the potatoes and a litre of water, season with salt and pepper, and let the soup \
simmer for thirty minutes. Serve it hot with fresh bread and a little butter.

The train was late again, so we waited on the platform and watched the clouds. A man played \
the guitar, a child fed the pigeons, and two old friends argued about football. When the \
train finally arrived, it was crowded and warm, but the journey through the valley was \
beautiful: rivers, villages, vineyards and castles passed by the window like pictures in a \
book.

Good software is written for people as much as for machines. Clear names, short functions \
and honest comments help the next reader understand the intent. Version control records \
every change, reviews catch mistakes early, and automated builds make sure that the program \
still works on every supported platform. Simple designs are easier to test, to explain and to \
maintain.

Questions and answers: Who wrote the letter? The teacher wrote the letter. When did the \
meeting start? It started at nine. Why is the sky blue? Because the air scatters blue light \
more than red light. How many people live in the village? About two thousand. Which road \
leads to the harbour? The narrow road on the left, past the church and the lighthouse.
"""

_KEY_SENTENCES = (
    "The future of AI is",
    "My name is Wolfgang and I live in Berlin.",
    "Where do I live?",
    "My name is Wolfgang and I live in [MASK].",
    "My name is Sarah and I live in London.",
    "My name is Clara and I live in Paris.",
)
_KEY_REPEATS = 24


def corpus_lines() -> list[str]:
    """Return the training corpus: the paragraphs, then the key sentences many times."""
    paragraphs = [p.strip() for p in _CORPUS.split("\n\n") if p.strip()]
    return paragraphs + [s for _ in range(_KEY_REPEATS) for s in _KEY_SENTENCES]
