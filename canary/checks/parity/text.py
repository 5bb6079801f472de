"""Natural-text parity items for real models: short paragraphs of plain English prose.

Written for this project (no external corpus: the canary runs offline and a user's clone carries
everything). Topics vary so that consecutive prompts share no opening block, and each paragraph
has names, numbers and references back to earlier sentences, so that what a model writes next
depends on what came before (the evidence check measures that: canary/checks/parity/reference.py).
For a real model, parity interleaves these with GSM8K-format items (checks.parity.prompt_text:
auto); the tiny builtin model was trained on arithmetic only and reads the GSM8K items alone.
"""

from __future__ import annotations

PARAGRAPHS: tuple[str, ...] = (
    "The lighthouse on Carrick Point was built in 1871 from granite quarried two miles inland. Its first "
    "keeper, Agnes Moll, kept a log of every ship that passed, and in her third winter she counted 412 of "
    "them. When the lens was replaced in 1923, the new one was carried up the 96 steps in eleven pieces.\n\n",
    "A sourdough starter is a culture of wild yeast and lactic acid bacteria. Feed it equal weights of "
    "flour and water each day, keep it near 24 degrees, and it will double within six hours. If it smells "
    "of nail varnish, it is hungry; if a grey liquid gathers on top, pour it off and feed it twice.\n\n",
    "On the night train from Vienna to Venice, the conductor, a tall man named Petrov, checked tickets "
    "at Villach and again at Udine. He told the passengers in carriage 7 that the dining car would close "
    "at ten, that breakfast came with the fare, and that the border would be crossed while they slept.\n\n",
    "Bees communicate the direction of a food source with a waggle dance. The angle of the dance against "
    "the vertical comb matches the angle between the sun and the flowers, and the length of each waggle "
    "run grows with the distance: roughly one second of waggling for every kilometre of flight.\n\n",
    "The village council met on Tuesday to settle the question of the old mill. Three members wanted it "
    "sold, two wanted it turned into a museum, and the chair, Mrs. Okafor, asked for a survey first. The "
    "survey cost 1,800 pounds and found that the roof beams, though old, were sound.\n\n",
    "To replace a bicycle inner tube, release the brake, open the quick-release lever and lift the wheel "
    "out. Push one tyre lever under the bead opposite the valve, hook it to a spoke, and slide a second "
    "lever around the rim. Check the inside of the tyre for glass before fitting the new tube.\n\n",
    "In 1609 Galileo heard of a Dutch spyglass and built his own within a day. By the end of that year "
    "his telescope magnified twenty times, enough to see that the Moon had mountains and that four small "
    "points of light moved around Jupiter. He named them after the Medici family, his patrons.\n\n",
    "Marta's grandmother kept her recipes in a tin box with a blue lid. The soup recipe was written on the "
    "back of a train ticket from 1958, the plum cake on a page torn from a school exercise book, and the "
    "bread on a card so stained with butter that only the oven temperature could still be read.\n\n",
    "A river's delta forms where the water slows as it meets the sea and drops the silt it carries. The "
    "coarsest sand settles first, near the mouth; the finest clay drifts furthest. Over centuries the "
    "channels shift, and a town that once stood on the shore may find itself twenty kilometres inland.\n\n",
    "The chess club's spring tournament had 32 players and five rounds. After round three only two "
    "players, Daniel and Ines, had won every game. They met in round four; Daniel offered a draw after 41 "
    "moves, Ines declined, and she won on move 58 with a pawn that had crossed the whole board.\n\n",
    "Copper roofs turn green because the metal reacts with water, carbon dioxide and sulphur in the air. "
    "The layer, called a patina, takes about twenty years to form in a city and longer by the sea. Once "
    "complete it protects the copper beneath, which is why old roofs last for centuries.\n\n",
    "Every morning at six, the baker on Harbour Street lit the oven and set out three trays: rye, white "
    "and a seeded loaf that sold out by nine. On Saturdays she added cinnamon buns, and the queue then "
    "reached the post office. Her son, who helped on weekends, counted 140 buns one June morning.\n\n",
    "A transformer changes alternating voltage with two coils wound on one iron core. If the second coil "
    "has ten times as many turns as the first, the voltage it delivers is ten times higher and the current "
    "ten times lower, so the power, apart from small losses as heat, stays the same.\n\n",
    "The expedition left base camp on the fourth of May with six climbers and twelve porters. Snow delayed "
    "them for two days at the second camp. On the ninth, Laila and Tomas reached the north col, fixed 300 "
    "metres of rope, and came back down before the wind rose in the afternoon.\n\n",
    "Libraries in the Middle Ages often chained their books to the shelves, because a single volume could "
    "cost as much as a farm. Readers stood at slanted desks, and the books were shelved with their spines "
    "facing inward so the chains, fixed to the front edge of the cover, would not tangle.\n\n",
    "When the storm knocked out the power, the hospital switched to its diesel generator within eight "
    "seconds. The generator could run for 72 hours on a full tank. By the second night the engineers had "
    "arranged a fuel delivery, and the lights in the ward never flickered again.\n\n",
    "A good cup of tea depends on the water. Black tea wants water just off the boil and three to five "
    "minutes; green tea wants water near 80 degrees and two minutes, or it turns bitter. Hard water dulls "
    "the colour, which is why the same leaves taste different in London and in Edinburgh.\n\n",
    "The orchestra rehearsed the symphony four times before the premiere. In the second rehearsal the "
    "conductor stopped at bar 212 and asked the horns to play more softly; in the third, he asked the "
    "violins to slow the opening of the slow movement. The premiere ran forty-three minutes.\n\n",
    "Salmon return to the river where they hatched, guided in the open sea by the Earth's magnetic field "
    "and, near the coast, by the smell of their home stream. A female lays several thousand eggs in a nest "
    "of gravel, and of those perhaps two fish will live to come back and spawn.\n\n",
    "The clockmaker's shop had forty clocks on its walls, and he kept them all a minute apart so that the "
    "chimes would not drown each other out. Customers who came in at noon heard the first clock strike and "
    "then, for forty minutes, another every sixty seconds until the last one in the back room.\n\n",
    "A suspension bridge hangs its deck from two main cables draped over tall towers. The cables are "
    "anchored in concrete blocks at each end, and the towers carry the weight straight down. The longer "
    "the span, the higher the towers must be, which is why the greatest bridges are also the tallest.\n\n",
    "Ravi planted his first garden when he was nine: a row of beans, two tomato plants and a sunflower "
    "that grew taller than his father. The beans failed, the tomatoes split in the August rain, but the "
    "sunflower produced so many seeds that he fed the birds with them until Christmas.\n\n",
    "Paper was invented in China around the year 105. It reached Samarkand in the eighth century, Baghdad "
    "soon after, and Spain by the twelfth. The first paper mill in England opened in 1495, and for the "
    "next three hundred years paper was made from old linen rags rather than from wood.\n\n",
    "The ferry to the island leaves at 7:40 and 16:15 in winter, and every two hours in summer. The "
    "crossing takes fifty minutes in calm weather. Cars must be at the pier twenty minutes early, and "
    "when the wind is above force eight, the captain may cancel the afternoon sailing.\n\n",
)
